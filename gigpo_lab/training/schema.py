"""Typed schema for the ``loss`` group, so that a misspelt key fails when the config is composed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class LossConfig:
    """Fields of ``conf/loss/*.yaml``; see ``PolicyLoss`` for their meaning."""

    _target_: str = "gigpo_lab.training.loss.PolicyLoss"
    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: Any = False  # bool, usually interpolated from ${estimator.kl_in_reward}
    entropy_coef: float = 0.01


#: ``"loss/<option>"`` -> schema (stored as ``schema/loss/<option>``).
SCHEMAS: dict[str, type] = {"loss/ppo": LossConfig}
