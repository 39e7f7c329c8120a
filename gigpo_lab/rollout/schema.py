"""Typed schema for the ``rollout`` config group, so that a misspelt key fails when the config is composed.

``conf/rollout/torch.yaml`` starts with ``defaults: [/schema/rollout/torch@_here_, _self_]``. The trainer builds the engine
with ``instantiate(cfg.rollout.engine)(policy=policy)`` and reads the collection sizes for the ``Collector``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineConfig:
    """The engine node: a partial constructor; its sampling keys interpolate the group's own keys."""

    _target_: str = "gigpo_lab.rollout.build_torch_engine"
    _partial_: bool = True
    temperature: Any = "${..temperature}"
    top_p: Any = "${..top_p}"
    max_new_tokens: Any = "${..max_new_tokens}"


@dataclass
class RolloutConfig:
    """Sampling and collection sizes (see ``conf/rollout/torch.yaml`` for each key's meaning).

    Attributes:
        temperature: softmax temperature of sampling (> 0); the sampling log-probs include it.
        top_p: nucleus mass in (0, 1]; 1 = off.
        max_new_tokens: tokens per response; None = the policy's ``default_max_new_tokens`` (tiny 1, hf 32).
        groups: B, episode groups per iteration (one env seed each).
        group_size: G, envs per group (reset with the group's seed).
        eval_episodes: held-out episodes per evaluation (one env per seed).
        eval_greedy: evaluate with argmax decoding instead of sampling.
        max_env_error_rate: in [0, 1]. An env that raises in ``step`` loses its trajectory (dropped from
            the batch, counted in ``rollout/env_errors``); when more than this share of an iteration's
            trajectories fail, the run stops with the env's traceback. 0 = stop at the first env error.
    """

    engine: EngineConfig = field(default_factory=EngineConfig)
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int | None = None
    groups: int = 8
    group_size: int = 8
    eval_episodes: int = 16
    eval_greedy: bool = True
    max_env_error_rate: float = 0.05


#: ``"rollout/<option>"`` -> schema (stored as ``schema/rollout/<option>``).
SCHEMAS: dict[str, type] = {"rollout/torch": RolloutConfig}
