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

from gigpo_lab.algorithm.base import Estimator, check_real
from gigpo_lab.algorithm.grouping import group_normalize, group_stats
from gigpo_lab.algorithm.grpo import episode_returns
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.choices import default_of


@register_estimator("reinforce_pp")
class ReinforcePP(Estimator):
    """Score minus the group's mean return, then whitened over the whole batch of rows.

    Args:
        invalid_action_penalty: p >= 0, subtracted from each invalid row's score (default 0.1).
        epsilon: eps > 0 of the batch whitening (default 1e-6).
    """

    #: The KL to the reference goes into the reward unless loss.kl_in_reward says otherwise (as ms-swift).
    kl_in_reward = True

    def __init__(self, invalid_action_penalty: float = 0.1, epsilon: float = 1e-6) -> None:
        name = self.name
        self.invalid_action_penalty = check_real(
            name, "invalid_action_penalty", invalid_action_penalty, low=0.0
        )
        self.epsilon = check_real(name, "epsilon", epsilon, low=0.0, low_open=True)
        super().__init__(invalid_action_penalty=self.invalid_action_penalty, epsilon=self.epsilon)

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


@dataclass
class ReinforcePPSchema:
    """The option ``estimator=reinforce_pp``: REINFORCE++ with a group baseline (see ``ReinforcePP``)."""

    _target_: str = "gigpo_lab.algorithm.reinforce_pp.ReinforcePP"
    #: p >= 0, subtracted from the score of each invalid row.
    invalid_action_penalty: float = default_of(ReinforcePP, "invalid_action_penalty")  # type: ignore[assignment]
    #: epsilon > 0 of the batch whitening.
    epsilon: float = default_of(ReinforcePP, "epsilon")  # type: ignore[assignment]


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/reinforce_pp": ReinforcePPSchema}
