"""Which groups of a collection to train on: two published rules, both blind to the estimator.

A group is the G episodes of one env seed. Both rules read only the episodes' undiscounted returns (the sum of
a trajectory's rewards), so whatever estimator runs next sees a subset of whole groups and nothing else:

- ``nonconstant`` (DAPO's dynamic sampling, Yu et al. 2025, arXiv 2503.14476, section 3.2; verl's
  ``recipe/dapo``, ``filter_groups``): drop every group whose returns are all equal (their group-relative
  advantages are all 0, so they only dilute the batch); a group of one episode is kept. The caller collects
  more groups until the batch is full, up to a cap.
- ``top_std`` (RAGEN's StarPO-S, Wang et al. 2025, arXiv 2504.20073, section 4.1; RAGEN
  ``ragen/trainer/agent_trainer.py``, ``_filter_rollout``): keep the ``int(share * K)`` groups of largest
  return std (unbiased), ties to the earlier group.

Worked example, 3 groups of 2 episodes with returns {0: [1, 1], 1: [0, 1], 2: [0, 3]}: stds 0, 0.71, 2.12;
``nonconstant`` keeps groups 1 and 2; ``top_std`` with share 0.5 keeps int(1.5) = 1 group: group 2.
"""

from __future__ import annotations

import torch

from gigpo_lab.algorithm.grouping import segment_count, segment_min, segment_sum


def episode_returns(rewards: torch.Tensor, traj: torch.Tensor, n_traj: int) -> torch.Tensor:
    """Each trajectory's undiscounted return. rewards: (N,) float; traj: (N,) int64 in 0..n_traj-1.
    Returns (n_traj,) float64."""
    return segment_sum(rewards.double(), traj, n_traj)


def group_return_std(returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
    """The unbiased std of each group's episode returns, 0 for a group of one episode.

    returns: (n_traj,) float64; group_of_traj: (n_traj,) int64 dense group ids in 0..n_groups-1.
    Returns (n_groups,) float64.
    """
    count = segment_count(group_of_traj, n_groups)
    mean = segment_sum(returns, group_of_traj, n_groups) / count.clamp(min=1)
    squares = segment_sum((returns - mean[group_of_traj]) ** 2, group_of_traj, n_groups)
    return torch.sqrt(squares / (count - 1).clamp(min=1))


def keep_nonconstant(returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
    """DAPO's rule: (n_groups,) bool, a group is kept when its returns differ (compared exactly, min < max), or
    when it has one episode. returns: (n_traj,); group_of_traj: (n_traj,) int64 in 0..n_groups-1."""
    low = segment_min(returns, group_of_traj, n_groups)
    high = -segment_min(-returns, group_of_traj, n_groups)
    return (low < high) | (segment_count(group_of_traj, n_groups) == 1)


def keep_top_std(std: torch.Tensor, share: float) -> torch.Tensor:
    """StarPO-S's rule: (K,) bool, the ``int(share * K)`` groups of largest std, ties to the lower group id."""
    k = std.numel()
    order = torch.sort(-std, stable=True).indices  # descending std, stable among equal stds
    keep = torch.zeros(k, dtype=torch.bool, device=std.device)
    keep[order[: int(share * k)]] = True
    return keep
