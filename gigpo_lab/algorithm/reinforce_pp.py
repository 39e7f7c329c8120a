"""reinforce_pp: REINFORCE++ with a group baseline (Hu, 2025, arXiv 2501.03262; "REINFORCE++-baseline").

ALGORITHMS.md, "reinforce_pp"::

    x_i = s_i - mean_{tau in group} R(tau),   s_i = R(tau_i) - p_i
    A_i = (x_i - mean_batch(x)) / (std_batch(x) + eps)      over every row of the batch, unbiased std

A group of one trajectory has baseline R(tau) itself, so x_i = -p_i. A batch of a single row whitens
to 0 (the centred value is exactly 0 and its std is undefined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import INVALID_ACTION_PENALTY, Estimator
from gigpo_lab.algorithm.grouping import group_normalize, group_stats
from gigpo_lab.algorithm.grpo import episode_returns
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param


@dataclass
class ReinforcePPSchema:
    """The option ``estimator=reinforce_pp``: REINFORCE++ with a group baseline (see ``ReinforcePP``)."""

    _target_: str = "gigpo_lab.algorithm.reinforce_pp.ReinforcePP"
    #: p, subtracted from the score of each invalid row.
    invalid_action_penalty: float = param(INVALID_ACTION_PENALTY, low=0.0)
    #: epsilon of the batch whitening.
    epsilon: float = param(1e-6, low=0.0, low_open=True)


@register_estimator("reinforce_pp")
class ReinforcePP(Estimator):
    """Score minus the group's mean return, then whitened over the whole batch of rows.

    Parameters: ``ReinforcePPSchema``, one line each.
    """

    #: The KL to the reference goes into the reward unless loss.kl_in_reward says otherwise (as ms-swift).
    kl_in_reward = True

    schema = ReinforcePPSchema

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        returns = episode_returns(rows)  # (J,)
        group_mean = group_stats(
            returns, rows.traj_group, rows.n_groups, with_std=False
        ).mean  # (K,) over trajectories
        centred = returns.index_select(0, rows.traj) - self.invalid_action_penalty * rows.invalid
        centred = centred - group_mean.index_select(0, rows.group)
        whole_batch = torch.zeros_like(rows.group)
        adv = group_normalize(
            centred, whole_batch, 1, mode="mean_std_norm", eps=self.epsilon, singleton="zero"
        )
        return adv, {"adv/centred_std": float(centred.std()) if rows.n > 1 else 0.0}


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/reinforce_pp": ReinforcePPSchema}
