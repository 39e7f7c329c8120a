"""grpo: the episode score normalised within its group (DeepSeekMath GRPO, arXiv 2402.03300).

ALGORITHMS.md, "grpo"; verl-agent ``gigpo/core_gigpo.py``, ``episode_norm_reward``. It is also GiGPO's
episode level A^E, so ``gigpo`` calls ``episode_advantages`` below and ``grpo`` equals ``gigpo`` with
omega = 0 bit for bit.

    s_i = R(tau_i) - p_i,   R(tau) = sum_t r_t,   p_i = invalid_action_penalty * invalid_i
    normalize_over=rows:          A_i = norm(s_i) with statistics over every row of the group
    normalize_over=trajectories:  A_i = norm(s_i) with statistics over one R(tau) per trajectory
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import (
    MODES,
    NORMALIZE_OVER,
    SINGLETON_POLICIES,
    Estimator,
    Mode,
    NormalizeOver,
    Singleton,
    check_choice,
    check_real,
)
from gigpo_lab.algorithm.grouping import group_normalize, segment_sum
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator


@dataclass(frozen=True)
class EpisodeLevel:
    """The validated parameters of the episode-level advantage (shared by grpo and gigpo)."""

    mode: str
    normalize_over: str
    invalid_action_penalty: float
    epsilon: float
    episode_singleton: str

    @classmethod
    def checked(cls, estimator: str, **params: object) -> EpisodeLevel:
        return cls(
            mode=check_choice(estimator, "mode", params["mode"], MODES),
            normalize_over=check_choice(
                estimator, "normalize_over", params["normalize_over"], NORMALIZE_OVER
            ),
            invalid_action_penalty=check_real(
                estimator, "invalid_action_penalty", params["invalid_action_penalty"], low=0.0
            ),
            epsilon=check_real(estimator, "epsilon", params["epsilon"], low=0.0, low_open=True),
            episode_singleton=check_choice(
                estimator, "episode_singleton", params["episode_singleton"], SINGLETON_POLICIES
            ),
        )


#: The episode level's defaults, written once: GRPO's and GiGPO's constructors and their schemas all read them,
#: so the functional API, the class and the config give the same estimator (docs/ALGORITHMS.md, section 14).
EPISODE_DEFAULTS = EpisodeLevel(
    mode="mean_norm",
    normalize_over="rows",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    episode_singleton="raw",
)


def episode_returns(rows: Rows) -> torch.Tensor:
    """R(tau) = sum_t r_t for each trajectory: (J,) float64, indexed by the dense ``rows.traj``."""
    return segment_sum(rows.rewards, rows.traj, rows.n_traj)


def episode_advantages(rows: Rows, level: EpisodeLevel) -> torch.Tensor:
    """A^E (N,) float64: the episode score s_i normalised within ``group_id`` (module docstring)."""
    returns = episode_returns(rows)
    scores = returns.index_select(0, rows.traj) - level.invalid_action_penalty * rows.invalid
    if level.normalize_over == "rows":  # verl-agent compute_mean_std_cross_steps=True
        stat_values, stat_segment = None, None
    else:  # one R(tau) per trajectory enters the statistics; each row keeps its own penalty
        stat_values, stat_segment = returns, rows.traj_group
    return group_normalize(
        scores,
        rows.group,
        rows.n_groups,
        mode=level.mode,
        eps=level.epsilon,
        singleton=level.episode_singleton,
        stat_values=stat_values,
        stat_segment=stat_segment,
    )


@register_estimator("grpo")
class GRPO(Estimator):
    """Group-normalised episode score, the same value for every step row of a trajectory (up to p_i).

    Args:
        mode: ``mean_norm`` (x - mean, Dr.GRPO-style, the default) or ``mean_std_norm`` ((x - mean)/(std + eps)).
        normalize_over: ``rows`` (every step row enters the statistics, verl-agent's default) or
            ``trajectories`` (one R(tau) per trajectory).
        invalid_action_penalty: p, >= 0, subtracted from each invalid row's score (default 0.1).
        epsilon: eps > 0 of ``mean_std_norm`` (default 1e-6).
        episode_singleton: a group with one statistics entry gets ``raw`` (mean 0, std 1, verl-agent) or ``zero``.
    """

    def __init__(
        self,
        mode: str = EPISODE_DEFAULTS.mode,
        normalize_over: str = EPISODE_DEFAULTS.normalize_over,
        invalid_action_penalty: float = EPISODE_DEFAULTS.invalid_action_penalty,
        epsilon: float = EPISODE_DEFAULTS.epsilon,
        episode_singleton: str = EPISODE_DEFAULTS.episode_singleton,
    ) -> None:
        self.episode = EpisodeLevel.checked(
            self.name,
            mode=mode,
            normalize_over=normalize_over,
            invalid_action_penalty=invalid_action_penalty,
            epsilon=epsilon,
            episode_singleton=episode_singleton,
        )
        super().__init__(**vars(self.episode))

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        adv = episode_advantages(rows, self.episode)
        return adv, {"adv/groups": float(rows.n_groups), "adv/group_size": rows.n / rows.n_groups}


@dataclass
class GRPOSchema:
    """The option ``estimator=grpo``: group-normalised episode score (see ``GRPO``)."""

    _target_: str = "gigpo_lab.algorithm.grpo.GRPO"
    #: mean_norm | mean_std_norm. mean_norm: x - mean; mean_std_norm: (x - mean) / (std + epsilon), unbiased std.
    mode: Mode = Mode[EPISODE_DEFAULTS.mode]
    #: rows | trajectories: every step row enters the group statistics, or one R(tau) per trajectory.
    normalize_over: NormalizeOver = NormalizeOver[EPISODE_DEFAULTS.normalize_over]
    #: p >= 0, subtracted from the score of each row whose action could not be parsed (paper: 0.1).
    invalid_action_penalty: float = EPISODE_DEFAULTS.invalid_action_penalty
    #: epsilon > 0 added to the std in mean_std_norm.
    epsilon: float = EPISODE_DEFAULTS.epsilon
    #: raw | zero: a group with one statistics entry gets its raw score (verl-agent) or 0 (ROLL, Trinity-RFT).
    episode_singleton: Singleton = Singleton[EPISODE_DEFAULTS.episode_singleton]


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/grpo": GRPOSchema}
