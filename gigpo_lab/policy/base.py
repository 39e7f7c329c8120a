"""The policy protocol: a tokenizer plus a causal LM that scores and extends token sequences.

Every policy (the tiny GPT and the HF model) implements ``build_prompt``, ``stop_ids`` and one
incremental forward, ``forward_logits``; the shared ``logprobs`` here and the rollout engine are built on it.

Row layout used everywhere (P prompt columns, R response columns)::

    prompt_ids    [pad pad p0 p1 p2]   left-padded,  prompt_mask   [0 0 1 1 1]
    response_ids  [r0 r1 eos pad]      right-padded, response_mask [1 1 1 0]

Positions count real tokens only (``cumsum(mask) - 1``), so a row's numbers do not depend on its padding.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from gigpo_lab.packing.logprobs import response_logprobs


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions (N, T) int64 of the tokens of ``attention_mask`` (N, T) bool: real tokens count 0, 1, ...;
    padding gets the position of the last real token before it (or 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class Policy(torch.nn.Module):
    """A tokenizer and a causal LM.

    Attributes:
        tokenizer: has ``pad_id``, ``eos_id``, ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.
        default_max_new_tokens: the response budget used when the rollout config leaves it null.
        packed_update: what ``trainer.shared_prefix=null`` means for this policy: whether the scoring and the
            update pack the rows' shared prompt runs (``forward_packed``).
        packed_tokens: what ``trainer.shared_prefix_tokens=null`` means: the most tokens of a packed chunk
            (0 = no bound).
        default_prefill: what ``rollout.engine.prefill=null`` means (a key of the torch engine's ``PREFILLS``).
    """

    tokenizer: Any
    default_max_new_tokens: int = 8
    packed_update: bool = False
    packed_tokens: int = 0
    default_prefill: str = "shared"

    def build_prompt(self, observation: str, anchor: str, history: list[tuple[str, str]]) -> list[int]:
        """Prompt token ids for one turn. ``history`` holds this episode's past (observation, action_text)
        pairs, oldest first; the policy keeps only its own window of it."""
        raise NotImplementedError

    def stop_ids(self) -> list[int]:
        """Token ids that end a response."""
        raise NotImplementedError

    def allowed_tokens(self, admissible: Sequence[str]) -> torch.Tensor | None:
        """The (V,) bool tokens the first response token may be in a state whose admissible commands are
        ``admissible`` (invalid-action masking), or None: the whole vocabulary. The base policy does not mask;
        ``TinyPolicy(mask_inadmissible=True)`` does."""
        return None

    def forward_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past: Any = None,
        logits_to_keep: int = 0,
        use_cache: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        """One incremental forward.

        Args:
            input_ids: (N, T) int64, the new tokens.
            attention_mask: (N, S + T) bool over the S cached tokens and the T new ones.
            past: the cache returned by the previous call, or None (then S = 0).
            logits_to_keep: return logits for only the last k new tokens (0: all T).
            use_cache: whether the caller wants the cache back (False may save memory; then it may be None).
        Returns:
            logits (N, k or T, V) float, and the cache extended by the T new tokens.
        """
        raise NotImplementedError

    def forward_packed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        layout: Any,
        keep: torch.Tensor,
        past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """One forward over a packed sequence of several rows that share tokens (``trainer.shared_prefix``).

        Args:
            input_ids: (T,) int64; positions: (T,) int64, each token's position in its own row.
            layout: the tree's ``gigpo_lab.packing.tree_attention.TreeLayout``: which earlier tokens each token
                attends to (its node's root path).
            keep: (K,) int64, the columns whose logits are returned.
            past: per layer the keys and values (1, H_kv, L, D) of a prefix every token sees (``prefix_kv``);
                ``layout`` is then ``after_prefix(L)``.
        Returns:
            logits (K, V) float.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no packed forward: set trainer.shared_prefix=false"
        )

    def prefill_packed(
        self, input_ids: torch.Tensor, positions: torch.Tensor, layout: Any, keep: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """``forward_packed``'s logits (K, V) and the cache of the packed sequence (one row of T tokens), for the
        torch engine's ``prefill: tree``; ``gather_cache`` cuts it into rows."""
        raise NotImplementedError(
            f"{type(self).__name__} has no packed prefill: set rollout.engine.prefill=shared"
        )

    def prefix_kv(self, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the keys and values (1, H_kv, L, D) of a prompt prefix ``input_ids`` (L,), differentiable,
        for ``forward_packed(..., past=...)`` (``trainer.shared_prefix`` runs a minibatch's opening once)."""
        raise NotImplementedError(f"{type(self).__name__} has no packed forward")

    def gather_cache(self, cache: Any, index: torch.Tensor) -> Any:
        """The cache of U rows, row u holding the tokens ``index[u]`` (U, L) int64 of the packed cache."""
        raise NotImplementedError(f"{type(self).__name__} has no packed prefill")

    def merged_weights(self) -> contextlib.AbstractContextManager:
        """A block in which the policy computes the same function, up to float rounding, in the layout that is
        cheapest for inference without grad (a LoRA policy: adapters merged into its base weights; the torch
        engine's ``merge_lora``). Here: nothing changes."""
        return contextlib.nullcontext()

    def select_cache(self, cache: Any, index: torch.Tensor) -> Any:
        """The cache of rows ``index`` (M,) int64 of ``cache``: rows may repeat or be dropped (prefix sharing and
        dropping finished rows in the engine). May reuse ``cache``'s storage; the input cache is not used again."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ----------------------------------------------------------------- the critic (estimator=ppo)
    @property
    def hidden_size(self) -> int:
        """The width D of ``prompt_hidden``; a policy that cannot serve a value head raises."""
        raise NotImplementedError(f"{type(self).__name__} exposes no hidden state for a value head")

    def prompt_hidden(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """The final hidden state (N, D) at each row's last prompt token (the prompt is left-padded, so its
        last column), differentiable. The value head reads it."""
        raise NotImplementedError(f"{type(self).__name__} exposes no hidden state for a value head")

    @property
    def can_serve_value_head(self) -> bool:
        """Whether this policy class implements ``prompt_hidden`` (a critic can sit on it)."""
        return type(self).prompt_hidden is not Policy.prompt_hidden

    @property
    def has_value_head(self) -> bool:
        """Whether ``add_value_head`` gave this policy its critic's head, the submodule ``value_head``: the
        trainer adds one only for an estimator that needs values, so every other run has exactly the
        parameters it always had."""
        return "value_head" in dict(self.named_children())

    def add_value_head(self) -> torch.nn.Linear:
        """Give the policy a value head, a ``Linear(D, 1)`` in float32 with zero weights and bias (V = 0 at the
        start; no random draw, so the run's other numbers do not move), registered as the submodule
        ``value_head``: it trains with the policy (its parameters are the policy's) and is saved with it."""
        if not self.has_value_head:
            head = torch.nn.Linear(self.hidden_size, 1, device=self.device, dtype=torch.float32)
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
            self.add_module("value_head", head)
        return self.value_head

    def values(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """V(s_t) (N,) float32 of each row: the value head on ``prompt_hidden`` (differentiable)."""
        if not self.has_value_head:
            raise RuntimeError(f"{type(self).__name__} has no value head; call add_value_head() first")
        head = self.value_head
        hidden = self.prompt_hidden(prompt_ids, prompt_mask)
        return head(hidden.to(head.weight.dtype)).squeeze(-1)

    def make_reference(self) -> Any:
        """The frozen reference that the KL term is measured against: anything with this policy's ``logprobs``.

        Here a deep copy in eval mode with gradients off (a second copy of the weights). A policy that can
        score as its own starting point overrides it: with LoRA, ``HFPolicy`` returns a view that runs this very
        module with its adapters disabled (``gigpo_lab.policy.lora.AdapterFreeReference``), so no copy is made.
        The reference is critic-free: a value head is not part of the copy.
        """
        reference = copy.deepcopy(self).eval().requires_grad_(False)
        if reference.has_value_head:
            del reference.value_head
        return reference

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Inside the block the policy computes its base model (adapters off). A policy without adapters has
        no base to fall back to, so this raises instead of silently scoring the trained weights."""
        raise NotImplementedError(f"{type(self).__name__} has no adapters to disable")
        yield  # pragma: no cover

    def logprobs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        allowed: torch.Tensor | None = None,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropies of the response tokens under the model's logits / ``temperature``.

        The trainer passes the rollout's sampling temperature, so that the PPO ratio and the KL are taken on
        the distribution the responses were sampled from (as verl does); 1.0 is the model's own distribution.

        Args:
            prompt_ids: (N, P) int64, left-padded; prompt_mask: (N, P) bool.
            response_ids: (N, R) int64, right-padded; response_mask: (N, R) bool.
            allowed: (N, V) bool or None: the tokens each row's first response token was sampled among
                (``allowed_tokens``); that position's distribution is restricted to them.
        Returns:
            logp (N, R) float: log p(response_ids[:, j] | prompt, response[:, :j]); 0 where masked.
            entropy (N, R) float: entropy of the full next-token distribution at that position; 0 where masked.
            Both are differentiable.
        """
        response_len = response_ids.shape[1]
        input_ids = torch.cat([prompt_ids, response_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        # The logits at columns P-1 .. P+R-2 predict the R response tokens.
        logits, _ = self.forward_logits(
            input_ids, attention_mask, None, logits_to_keep=response_len + 1, use_cache=False
        )
        return response_logprobs(logits[:, :-1], response_ids, response_mask, temperature, allowed)
