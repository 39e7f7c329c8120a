"""rloo: REINFORCE Leave-One-Out (Kool et al., 2019; Ahmadian et al., 2024, arXiv 2402.14740).

ALGORITHMS.md, "rloo". The baseline of a trajectory is the mean return of the *other* trajectories of
its group::

    b(tau) = (sum_{tau' in group} R(tau') - R(tau)) / (n_group - 1),   b = 0 for a group of one
    A_i    = s_i - b(tau_i),   s_i = R(tau_i) - p_i
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import INVALID_ACTION_PENALTY, Estimator
from gigpo_lab.algorithm.grouping import segment_count, segment_min, segment_sum
from gigpo_lab.algorithm.grpo import episode_returns
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param


@dataclass
class RLOOSchema:
    """The option ``estimator=rloo``: leave-one-out baseline (see ``RLOO``)."""

    _target_: str = "gigpo_lab.algorithm.rloo.RLOO"
    #: p, subtracted from the score of each invalid row.
    invalid_action_penalty: float = param(INVALID_ACTION_PENALTY, low=0.0)


@register_estimator("rloo")
class RLOO(Estimator):
    """Episode score minus the leave-one-out mean return of the group's other trajectories.

    Parameters: ``RLOOSchema``, one line each.
    """

    #: The KL to the reference goes into the reward unless loss.kl_in_reward says otherwise (as ms-swift).
    kl_in_reward = True

    schema = RLOOSchema

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        returns = episode_returns(rows)  # (J,)
        group = rows.traj_group
        n = segment_count(group, rows.n_groups).index_select(0, group)  # trajectories in tau's group
        # Sums shifted by the group's minimum return, so that a constant group's baseline is exactly R.
        ref = segment_min(returns, group, rows.n_groups).index_select(0, group)
        others = segment_sum(returns - ref, group, rows.n_groups).index_select(0, group) - (returns - ref)
        baseline = torch.where(n > 1, ref + others / (n - 1).clamp(min=1), torch.zeros_like(returns))
        adv = (returns - baseline).index_select(0, rows.traj) - self.invalid_action_penalty * rows.invalid
        return adv, {"adv/baseline_mean": float(baseline.mean())}


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/rloo": RLOOSchema}
