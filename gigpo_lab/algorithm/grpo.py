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
    INVALID_ACTION_PENALTY,
    Estimator,
    Mode,
    NormalizeOver,
    Singleton,
)
from gigpo_lab.algorithm.grouping import group_normalize, segment_sum
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param


@dataclass
class GRPOSchema:
    """The option ``estimator=grpo``: group-normalised episode score (see ``GRPO``)."""

    _target_: str = "gigpo_lab.algorithm.grpo.GRPO"
    #: mean_norm | mean_std_norm. mean_norm: x - mean; mean_std_norm: (x - mean) / (std + epsilon), unbiased std.
    mode: Mode = Mode["mean_norm"]
    #: rows | trajectories: every step row enters the group statistics, or one R(tau) per trajectory.
    normalize_over: NormalizeOver = NormalizeOver["rows"]
    #: p, subtracted from the score of each row whose action could not be parsed (paper: 0.1).
    invalid_action_penalty: float = param(INVALID_ACTION_PENALTY, low=0.0)
    #: epsilon added to the std in mean_std_norm.
    epsilon: float = param(1e-6, low=0.0, low_open=True)
    #: raw | zero: a group with one statistics entry gets its raw score (verl-agent) or 0 (ROLL, Trinity-RFT).
    episode_singleton: Singleton = Singleton["raw"]


def episode_returns(rows: Rows) -> torch.Tensor:
    """R(tau) = sum_t r_t for each trajectory: (J,) float64, indexed by the dense ``rows.traj``."""
    return segment_sum(rows.rewards, rows.traj, rows.n_traj)


def episode_advantages(rows: Rows, level: GRPOSchema) -> torch.Tensor:
    """A^E (N,) float64: the episode score s_i normalised within ``group_id`` (module docstring). ``level``:
    anything with ``GRPOSchema``'s parameters, checked: the estimator (grpo, gigpo, hgpo, graphgpo)."""
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

    Parameters: ``GRPOSchema``, one line each.
    """

    schema = GRPOSchema

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        adv = episode_advantages(rows, self)
        return adv, {"adv/groups": float(rows.n_groups), "adv/group_size": rows.n / rows.n_groups}


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/grpo": GRPOSchema}
