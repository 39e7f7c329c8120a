"""gigpo_step_index: the GiGPO variant of the ms-swift pull request #7364 (step-index groups).

ALGORITHMS.md, "gigpo_step_index". It groups steps by their index t, not by their state, and gives
every row of a trajectory the same value::

    A^T(tau) = R(tau) - mean_{tau' in group} R(tau')
    a_t      = r_t - mean of r over the rows with the same (group_id, step_id)
    abar(tau)= mean_t a_t over tau's steps
    A_i      = A^T(tau_i) + omega * abar(tau_i)        [ / (std_{group} R + eps) if scale_by_std ]

The std is the unbiased std of the group's trajectory returns; a group of one trajectory has A^T = 0
and abar = 0, and its std is taken as 1. The contract gives this variant no invalid-action penalty
(its value is per trajectory), so it has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import BASE_COLUMNS, Estimator
from gigpo_lab.algorithm.grouping import group_normalize, group_stats, pack, segment_count, segment_sum
from gigpo_lab.algorithm.grpo import episode_returns
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param


@dataclass
class GiGPOStepIndexSchema:
    """The option ``estimator=gigpo_step_index``: the ms-swift PR #7364 variant (see ``GiGPOStepIndex``)."""

    _target_: str = "gigpo_lab.algorithm.step_index.GiGPOStepIndex"
    #: omega, weight of the mean step-index advantage.
    step_advantage_weight: float = param(1.0, low=0.0)
    #: true: divide by (std of the group's returns + epsilon).
    scale_by_std: bool = False
    #: epsilon of scale_by_std.
    epsilon: float = param(1e-6, low=0.0, low_open=True)


@register_estimator("gigpo_step_index")
class GiGPOStepIndex(Estimator):
    """Trajectory advantage plus omega times the mean step-index advantage, one value per trajectory.

    Parameters: ``GiGPOStepIndexSchema``, one line each.
    """

    schema = GiGPOStepIndexSchema

    @property
    def requires(self) -> tuple[str, ...]:
        return (*BASE_COLUMNS, "step_ids")

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        returns = episode_returns(rows)  # (J,)
        # A^T: group mean over trajectories; a group of one gives exactly 0 (R - R).
        traj_adv = group_normalize(
            returns, rows.traj_group, rows.n_groups, mode="mean_norm", eps=self.epsilon, singleton="zero"
        )
        index_group, n_index_groups = pack(rows.group, rows.n_groups, rows.step)  # (group_id, step_id)
        step = group_normalize(
            rows.rewards, index_group, n_index_groups, mode="mean_norm", eps=self.epsilon, singleton="zero"
        )
        step_mean = segment_sum(step, rows.traj, rows.n_traj) / segment_count(rows.traj, rows.n_traj)
        value = traj_adv + self.step_advantage_weight * step_mean  # (J,)
        if self.scale_by_std:
            count, _, std = group_stats(returns, rows.traj_group, rows.n_groups)
            std = torch.where(count > 1, std, torch.ones_like(std))
            value = value / (std[rows.traj_group] + self.epsilon)
        return value.index_select(0, rows.traj), {
            "adv/traj_mean": float(traj_adv.mean()),
            "adv/step_mean": float(step_mean.mean()),
            "adv/step_groups": float(n_index_groups),
        }


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/gigpo_step_index": GiGPOStepIndexSchema}
