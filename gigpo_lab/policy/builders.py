"""What the ``model`` options build: ``build_tiny_policy`` and ``build_hf_policy`` (``smollm2.py`` builds on the
latter); their choices and ``LoraSettings`` are in ``settings.py``, which the policies import too.

Importable without torch: composing a config reads these signatures' defaults (``gigpo_lab.policy.schema``),
and ``gigpo-lab train --help`` or a config mistake should not wait for torch. Each builder imports its policy
class, and torch, when it is called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gigpo_lab.policy.settings import DTYPES, LoraSettings

if TYPE_CHECKING:
    from gigpo_lab.policy.hf import HFPolicy
    from gigpo_lab.policy.tiny import TinyPolicy


def build_tiny_policy(
    vocabulary: Sequence[str],
    d_model: int = 128,
    n_layers: int = 2,
    n_heads: int = 4,
    max_seq_len: int = 256,
    prompt_source: str = "anchor",
    history_window: int = 2,
    seed: int = 0,
    qk_norm: bool = True,
    mark_unchanged: bool = True,
    actions: Sequence[str] = (),
    mask_inadmissible: bool = False,
) -> TinyPolicy:
    """A ``TinyPolicy`` over ``vocabulary`` (e.g. ``env.unwrapped.vocabulary()``), initialised from ``seed``
    alone (the global RNG is left untouched). With ``mark_unchanged`` the word ``UNCHANGED`` joins the
    vocabulary (after it, so the other words keep their ids). ``actions`` (``env.unwrapped.action_names``):
    each command of several words becomes one more token, after those (``WordTokenizer``'s phrases), so the
    one-token response can be any command; an env whose commands are single words gets no new token.
    ``mask_inadmissible``: the response token is drawn among the state's admissible commands alone
    (``TinyPolicy``)."""
    import torch

    from gigpo_lab.policy.tiny import UNCHANGED, TinyPolicy
    from gigpo_lab.policy.tiny_gpt import TinyGPT
    from gigpo_lab.policy.word_tokenizer import WordTokenizer

    words = [*vocabulary, UNCHANGED] if mark_unchanged else vocabulary
    tokenizer = WordTokenizer(words, phrases=actions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(tokenizer.vocab_size, d_model, n_layers, n_heads, max_seq_len, qk_norm)
    return TinyPolicy(tokenizer, model, prompt_source, history_window, mark_unchanged, mask_inadmissible)


def build_hf_policy(
    path: str,
    dtype: str = "float32",
    system_prompt: str | None = None,
    history_window: int = 2,
    use_chat_template: bool = True,
    gradient_checkpointing: bool = False,
    lora: Mapping | None = None,
    response_prefix: str | None = None,
    vocabulary: Sequence[str] | None = None,
    actions: Sequence[str] | None = None,
) -> HFPolicy:
    """Load ``AutoModelForCausalLM`` and ``AutoTokenizer`` from the local folder ``path``.

    Args:
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``: the parameters' dtype (also the adapters').
            bfloat16 halves memory, but AdamW updates of ~1e-6 relative size vanish in bf16 weights; for full
            fine-tuning on GPUs prefer float32 weights with ``lightning.precision=bf16-mixed``.
        system_prompt: the task description; None = ``gigpo_lab.policy.hf.DEFAULT_SYSTEM_PROMPT``.
        history_window: past (observation, action) pairs in the prompt.
        use_chat_template: use the tokenizer's chat template when it has one (else the plain-text layout).
        gradient_checkpointing: recompute activations in backward (saves memory, costs time); applies in
            training mode only (rollouts run in eval mode with the KV cache).
        lora: ``LoraSettings`` fields (``enabled``, ``r``, ``alpha``, ``dropout``, ``target_modules``); None or
            ``enabled: false`` trains every weight.
        response_prefix: text the assistant's answer starts with, written into the prompt (None = none).
        vocabulary, actions: ignored; accepted so every model builder takes the trainer's ``vocabulary=`` and
            ``actions=`` (an LLM writes a command in its own tokens).
    """
    import torch

    from gigpo_lab.policy.hf import DEFAULT_SYSTEM_PROMPT, HFPolicy
    from gigpo_lab.policy.lora import apply_lora

    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"model.path={str(path)!r} is not a Hugging Face model folder: expected a local folder with "
            "config.json and tokenizer files (set it with model.path=/path/to/model)."
        )
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is not one of {DTYPES}")
    lora_settings = LoraSettings.from_config(lora)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    if gradient_checkpointing:
        # transformers 5.2x renamed it activation_checkpointing_enable; older versions only have the old name.
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
        model.config.use_cache = False
    if lora_settings.enabled:
        if gradient_checkpointing:
            # the frozen embeddings give inputs without grad; checkpointed blocks still need a graph to recompute
            model.enable_input_require_grads()
        model = apply_lora(model, lora_settings)
    prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    policy = HFPolicy(model, tokenizer, prompt, history_window, use_chat_template, response_prefix or "")
    policy.build_args = {
        "path": str(folder.resolve()),
        "dtype": str(dtype),  # a plain str (a config Enum member would not load with weights_only=True)
        "lora": lora_settings.as_dict() if lora_settings.enabled else None,
    }
    return policy
