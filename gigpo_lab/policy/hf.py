"""A Hugging Face causal LM as a policy (local folder only; nothing is downloaded).

Prompt, with the tokenizer's chat template (``add_generation_prompt=True``)::

    system:    the task and the <action>...</action> answer format
    user:      observation t-w        ┐ the last ``history_window`` (observation, action) pairs
    assistant: <action>up</action>    ┘
    user:      observation t
    assistant: (generation starts here)

Without a chat template (or with ``use_chat_template=False``) the same turns are written as plain text:
``"{system}\\n\\nObservation:\\n{obs}\\nAction: {action}\\n\\n...Observation:\\n{obs}\\nAction: "``.
The anchor is not used: an LLM reads the full observation.

A ``response_prefix`` (e.g. ``"<action>"``) is written after the generation prompt, so the model's answer
starts inside it (a small model that ignores the format then only has to name the action); past assistant
turns show it too, and the env's ``action_pattern`` must then match a response that lacks it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from gigpo_lab.packing.tree_attention import TreeLayout, tree_attention
from gigpo_lab.policy.base import Policy, position_ids_from_mask
from gigpo_lab.policy.lora import (
    AdapterFreeReference,
    adapters_disabled,
    base_model,
    is_peft,
    merged_adapters,
    merged_state_dict,
)

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent in a text game. Each turn you read an observation of the game. "
    "Answer with exactly one admissible action inside action tags, for example <action>left</action>."
)
#: Token strings that end a turn in common chat formats; those present as single tokens become stop ids.
TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>", "</action>")


class HFTokenizer:
    """Adapter giving a ``transformers`` tokenizer the policy-tokenizer interface.

    ``pad_id`` falls back to ``eos_id`` when the tokenizer has no pad token (padding is always masked).
    """

    def __init__(self, hf_tokenizer: Any):
        self.hf = hf_tokenizer
        self.eos_id: int = hf_tokenizer.eos_token_id
        pad = hf_tokenizer.pad_token_id
        self.pad_id: int = self.eos_id if pad is None else pad

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def single_token_id(self, text: str) -> int | None:
        """The id of ``text`` if it is exactly one token, else None."""
        ids = self.encode(text)
        return ids[0] if len(ids) == 1 else None


class HFPolicy(Policy):
    """``AutoModelForCausalLM`` + tokenizer (the model optionally wrapped in peft LoRA adapters).

    Args:
        model: the causal LM (or its peft wrapper). tokenizer: the ``transformers`` tokenizer.
        system_prompt: the task description. history_window: past (observation, action) pairs kept.
        use_chat_template: use the tokenizer's chat template when it has one.
        response_prefix: text the assistant's turn starts with, part of the prompt ("" = none).

    Attributes:
        build_args: how ``build_hf_policy`` made it (``path``, ``dtype``, ``lora``); saved in every checkpoint
            as the module's extra state, so ``gigpo_lab.policy.export`` can rebuild it from the checkpoint.
    """

    default_max_new_tokens = 32

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        system_prompt: str,
        history_window: int = 2,
        use_chat_template: bool = True,
        response_prefix: str = "",
    ):
        super().__init__()
        if history_window < 0:
            raise ValueError(f"history_window={history_window} must be >= 0")
        self.model = model
        self.tokenizer = HFTokenizer(tokenizer)
        self.system_prompt = system_prompt
        self.history_window = history_window
        self.use_chat_template = use_chat_template and bool(getattr(tokenizer, "chat_template", None))
        self.response_prefix = response_prefix or ""
        max_positions = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_prompt_len = max(1, max_positions - self.default_max_new_tokens)
        # transformers >= 5.2x names the KV cache `cache`; older versions `past_key_values` (a peft wrapper
        # passes keywords through, so ask the model inside it).
        forward_params = inspect.signature(base_model(model).forward).parameters
        self._cache_name = "cache" if "cache" in forward_params else "past_key_values"
        self.build_args: dict[str, Any] = {}

    @property
    def lora_enabled(self) -> bool:
        """Whether the model carries LoRA adapters (then only they train)."""
        return is_peft(self.model)

    def make_reference(self) -> Any:
        """With LoRA: this module with its adapters disabled (no copy). Otherwise a frozen deep copy."""
        if self.lora_enabled:
            return AdapterFreeReference(self)
        return super().make_reference()

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Inside the block the policy is its base model (LoRA adapters off)."""
        if not self.lora_enabled:
            raise NotImplementedError(
                "this HFPolicy has no LoRA adapters to disable (model.lora.enabled=false)"
            )
        with adapters_disabled(self.model):
            yield

    def merged_weights(self) -> contextlib.AbstractContextManager:
        """With LoRA: the adapters merged into the base weights, adapters off (``lora.merged_adapters``; the
        weights are bit-for-bit restored on exit). Without: nothing changes."""
        return merged_adapters(self.model)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights as a plain ``AutoModelForCausalLM`` of the base architecture names them, LoRA merged
        (what the vLLM engine loads and the export writes); the policy is not changed."""
        return merged_state_dict(self.model)

    def get_extra_state(self) -> dict[str, Any]:
        return dict(self.build_args)

    def set_extra_state(self, state: Any) -> None:
        self.build_args = dict(state or {})

    def prompt_text(self, observation: str, history: list[tuple[str, str]]) -> str:
        """The prompt as text (chat template or plain fallback), ready for generation."""
        past = history[-self.history_window :] if self.history_window else []
        prefix = self.response_prefix
        if self.use_chat_template:
            messages = [{"role": "system", "content": self.system_prompt}]
            for past_observation, action in past:
                messages.append({"role": "user", "content": past_observation})
                messages.append({"role": "assistant", "content": prefix + action})
            messages.append({"role": "user", "content": observation})
            text = self.tokenizer.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return text + prefix
        turns = [f"Observation:\n{o}\nAction: {prefix}{a}\n\n" for o, a in past]
        return f"{self.system_prompt}\n\n" + "".join(turns) + f"Observation:\n{observation}\nAction: {prefix}"

    def build_prompt(self, observation: str, anchor: str, history: list[tuple[str, str]]) -> list[int]:
        """Token ids of ``prompt_text`` (the plain fallback adds the tokenizer's own BOS, if any), left-truncated
        to ``max_position_embeddings - default_max_new_tokens``."""
        text = self.prompt_text(observation, history)
        ids = self.tokenizer.hf.encode(text, add_special_tokens=not self.use_chat_template)
        return ids[-self.max_prompt_len :]

    def stop_ids(self) -> list[int]:
        """eos, the generation config's eos ids, and whichever of ``TURN_END_TOKENS`` are single tokens."""
        ids = {self.tokenizer.eos_id}
        config_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
        ids.update(self.tokenizer.single_token_id(t) for t in TURN_END_TOKENS)
        ids.discard(None)
        return sorted(ids)

    def forward_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past: Any = None,
        logits_to_keep: int = 0,
        use_cache: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        t = input_ids.shape[1]
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask.long(),
            position_ids=position_ids_from_mask(attention_mask)[:, -t:],
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **{self._cache_name: past},
        )
        return out.logits, getattr(out, self._cache_name)

    @property
    def hidden_size(self) -> int:
        return int(base_model(self.model).config.hidden_size)

    def prompt_hidden(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden state (after its final norm; ``PreTrainedModel.base_model``, the LM head
        left out) (N, D) at each row's last prompt token. With LoRA the adapters are in the backbone, on."""
        backbone = base_model(self.model).base_model
        out = backbone(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            position_ids=position_ids_from_mask(prompt_mask),
            use_cache=False,
        )
        return out.last_hidden_state[:, -1]

    def forward_packed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        layout: TreeLayout,
        keep: torch.Tensor,
        past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Logits (K, V) at columns ``keep`` (K,) of one packed sequence ``input_ids`` (T,) with positions (T,)
        and the attention pattern of the tree ``layout``: the model runs ``tree_attention_forward`` (one attention
        per tree node over its root path's keys). ``past``: per layer the keys and values (1, H_kv, L, D) of a
        prefix every token sees (``prefix_kv``; ``layout`` must then be ``after_prefix(L)``)."""
        return self._packed(input_ids, positions, layout, keep, use_cache=False, past=past)[0]

    def prefill_packed(
        self, input_ids: torch.Tensor, positions: torch.Tensor, layout: TreeLayout, keep: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """``forward_packed``'s logits (K, V) and the KV cache of the packed sequence (batch 1, T tokens), to be
        cut into rows by ``gather_cache``."""
        return self._packed(input_ids, positions, layout, keep, use_cache=True)

    def prefix_kv(self, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the keys and values (1, H_kv, L, D) of the prompt prefix ``input_ids`` (L,) at positions
        0..L-1 (differentiable), for ``forward_packed(past=...)``."""
        ones = torch.ones(1, len(input_ids), dtype=torch.bool, device=input_ids.device)
        _, cache = self.forward_logits(input_ids[None], ones, None, logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _packed(
        self, input_ids, positions, layout, keep, use_cache: bool, past=None
    ) -> tuple[torch.Tensor, Any]:
        # the 4D mask is a placeholder: transformers passes a 4D mask through as prepared, and the tree
        # attention reads the layout instead
        placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=input_ids.device)
        cache = None
        if past is not None:
            from transformers import DynamicCache

            cache = DynamicCache()
            for layer, (keys, values) in enumerate(past):
                cache.update(keys, values, layer)
        with tree_attention(base_model(self.model).config):
            out = self.model(
                input_ids=input_ids[None],
                attention_mask=placeholder,
                position_ids=positions[None],
                use_cache=use_cache,
                logits_to_keep=keep,
                tree_layout=layout,
                **{self._cache_name: cache},
            )
        return out.logits[0], getattr(out, self._cache_name)

    def gather_cache(self, cache: Any, index: torch.Tensor) -> Any:
        """Cut a packed cache (batch 1, T tokens) into U rows: row u holds the packed tokens ``index[u]``; index
        (U, L) int64 (in place: the layers' keys and values become (U, H, L, D))."""
        for layer in cache.layers:
            layer.keys = layer.keys[0][:, index].transpose(0, 1).contiguous()
            layer.values = layer.values[0][:, index].transpose(0, 1).contiguous()
        return cache

    def select_cache(self, cache: Any, index: torch.Tensor) -> Any:
        """``Cache.reorder_cache`` is an ``index_select`` on the batch dimension of every layer (in place)."""
        cache.reorder_cache(index)
        return cache
