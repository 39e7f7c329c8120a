"""Typed schemas of the ``estimator`` config group, stored in Hydra's ConfigStore.

Each ``conf/estimator/<name>.yaml`` starts with ``defaults: [/schema/estimator/<name>@_here_, _self_]``
(``gigpo_lab.config_paths.register_schemas`` stores them there, out of the option list), so a misspelt key
(``step_advantge_weight``) fails when the config is composed instead of silently adding a key. Values
are checked by the estimator's constructor, which lists the allowed ones, when the trainer instantiates
it (before the first rollout). This module imports Hydra; ``gigpo_lab.advantages`` itself does not import it.

Every field's default equals the estimator's constructor default (a test checks it). Where the loss puts the
KL is a loss setting (``loss.kl_in_reward``); its per-estimator default is the class attribute
``Estimator.kl_in_reward``. Choice fields
are Enums built from the constants the constructors check, so a bad value fails at compose time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gigpo_lab.advantages.base import MODES, NORMALIZE_OVER, SINGLETON_POLICIES
from gigpo_lab.choices import choice_enum

Mode = choice_enum("Mode", MODES, __name__)
NormalizeOver = choice_enum("NormalizeOver", NORMALIZE_OVER, __name__)
Singleton = choice_enum("Singleton", SINGLETON_POLICIES, __name__)


@dataclass
class GRPOSchema:
    """``conf/estimator/grpo.yaml``: group-normalised episode score (see ``GRPO``)."""

    _target_: str = "gigpo_lab.advantages.grpo.GRPO"
    #: mean_norm | mean_std_norm. mean_norm: x - mean; mean_std_norm: (x - mean) / (std + epsilon), unbiased std.
    mode: Mode = Mode.mean_norm
    #: rows | trajectories: every step row enters the group statistics, or one R(tau) per trajectory.
    normalize_over: NormalizeOver = NormalizeOver.rows
    #: p >= 0, subtracted from the score of each row whose action could not be parsed (paper: 0.1).
    invalid_action_penalty: float = 0.1
    #: epsilon > 0 added to the std in mean_std_norm.
    epsilon: float = 1e-6
    #: raw | zero: a group with one statistics entry gets its raw score (verl-agent) or 0 (ROLL, Trinity-RFT).
    episode_singleton: Singleton = Singleton.raw


@dataclass
class RLOOSchema:
    """``conf/estimator/rloo.yaml``: leave-one-out baseline (see ``RLOO``)."""

    _target_: str = "gigpo_lab.advantages.rloo.RLOO"
    #: p >= 0, subtracted from the score of each invalid row.
    invalid_action_penalty: float = 0.1


@dataclass
class ReinforcePPSchema:
    """``conf/estimator/reinforce_pp.yaml``: REINFORCE++ with a group baseline (see ``ReinforcePP``)."""

    _target_: str = "gigpo_lab.advantages.reinforce_pp.ReinforcePP"
    #: p >= 0, subtracted from the score of each invalid row.
    invalid_action_penalty: float = 0.1
    #: epsilon > 0 of the batch whitening.
    epsilon: float = 1e-6


@dataclass
class GiGPOSchema(GRPOSchema):
    """``conf/estimator/gigpo.yaml``: episode-level GRPO + omega x step-level anchor groups (see ``GiGPO``)."""

    _target_: str = "gigpo_lab.advantages.gigpo.GiGPO"
    #: omega >= 0, weight of the step-level advantage (paper: 1.0; 0 gives grpo exactly).
    step_advantage_weight: float = 1.0
    #: gamma in [0, 1], discount of the step return (paper: 0.95; verl-agent's own default is 1.0).
    gamma: float = 0.95
    #: zero | raw: a step group of one row gets 0 (ALGORITHMS.md) or its own return.
    step_singleton: Singleton = Singleton.zero
    #: null (exact anchor ids) or a difflib ratio in (0, 1) for clustering text anchors (needs anchor_texts).
    anchor_similarity_threshold: Optional[float] = None  # noqa: UP045 (OmegaConf reads typing.Optional)


@dataclass
class GiGPOStepIndexSchema:
    """``conf/estimator/gigpo_step_index.yaml``: the ms-swift PR #7364 variant (see ``GiGPOStepIndex``)."""

    _target_: str = "gigpo_lab.advantages.step_index.GiGPOStepIndex"
    #: omega >= 0, weight of the mean step-index advantage.
    step_advantage_weight: float = 1.0
    #: true: divide by (std of the group's returns + epsilon).
    scale_by_std: bool = False
    #: epsilon > 0 of scale_by_std.
    epsilon: float = 1e-6


#: ``"estimator/<option>"`` -> schema; ``conf/estimator/<option>.yaml`` extends ``/schema/estimator/<option>``.
SCHEMAS: dict[str, type] = {
    "estimator/grpo": GRPOSchema,
    "estimator/rloo": RLOOSchema,
    "estimator/reinforce_pp": ReinforcePPSchema,
    "estimator/gigpo": GiGPOSchema,
    "estimator/gigpo_step_index": GiGPOStepIndexSchema,
}
