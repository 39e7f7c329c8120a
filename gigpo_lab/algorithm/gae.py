"""Generalized advantage estimation at the turn level, for PPO with a learned critic.

Schulman et al. 2016 (arXiv 1506.02438), eq. 16, with one value per *turn* (a row of the batch) as multi-turn
agent trainers compute it (RAGEN's and verl-agent's PPO: the critic's value read at the turn's last prompt
token, the turn's advantage given to all of its response tokens)::

    delta_t = r_t + gamma * V_{t+1} - V_t          V_T = 0: nothing follows a trajectory's last turn
    A_t     = sum_l (gamma * lam)^l * delta_{t+l}  = delta_t + gamma * lam * A_{t+1}
    R_t     = A_t + V_t                            the critic's regression target

An episode the time limit cut is treated as ended there, as the lab's critic-free estimators treat it by
default. ``A`` is ``discounted_returns`` of the deltas with the factor gamma * lam, so it shares that scan
(O(N log T), no loop over rows). Checks: lam = 1 with V = 0 gives the discounted return; lam = 0 gives the
TD error (tests/algorithm/test_gae.py, against a loop written from the equations above).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.returns import TrajectoryLayout, discounted_returns


def next_in_trajectory(values: torch.Tensor, layout: TrajectoryLayout) -> torch.Tensor:
    """V_{t+1} of each row's trajectory, 0 after its last row.

    values: (N,) float, rows in any order; layout: from ``trajectory_layout``. Returns (N,) in the rows' order.
    """
    import torch

    position, length = layout
    laid = torch.empty_like(values).scatter_(0, position, values)  # (N,) in (traj, step) order
    shifted = torch.zeros_like(laid)
    shifted[:-1] = laid[1:]
    shifted[torch.cumsum(length, 0) - 1] = 0.0  # a trajectory's last turn has no successor
    return shifted.index_select(0, position)


def turn_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    traj: torch.Tensor,
    layout: TrajectoryLayout,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lam) advantages and the critic's targets, one per turn (see the module docstring).

    Args:
        rewards: (N,) float, one per turn (row), rows in any order.
        values: (N,) float, the critic's V(s_t) of each row (no grad).
        traj: (N,) int64 dense trajectory ids; layout: from ``trajectory_layout``.
        gamma, lam: in [0, 1].
    Returns:
        advantages (N,) and returns (N,) = advantages + values, in the rows' order.
    """
    delta = rewards + gamma * next_in_trajectory(values, layout) - values
    advantages = discounted_returns(delta, traj, layout, gamma * lam)
    return advantages, advantages + values
