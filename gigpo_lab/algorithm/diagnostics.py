"""Per-iteration diagnostics that show *why* a run fails (docs/WHY_RUNS_FAIL.md).

Each function reads columns the iteration already has and returns ``{metric: float}``; nothing here changes
the training numerics.

- ``group_signal``: the groups that carry no episode-level signal. A group whose trajectories all earned the
  same return has episode advantage 0 for every row (GRPO learns nothing from it; DAPO's "dynamic sampling"
  drops such groups, arXiv 2503.14476). RAGEN (arXiv 2504.20073) reads a falling within-group reward std as
  the early warning of its "Echo Trap" collapse.
- ``logprob_gap``: how far the old log-probs recomputed by the policy are from the engine's sampling
  log-probs. They must agree (up to float error) for the PPO ratio to start at 1.
- ``CollapseCounter``: issue #12's collapse: once rollout success has passed 0.5, an iteration whose
  invalid-action rate is above 0.3.
- ``revisit_rate`` (``revisits``, per episode): the share of episodes that came back to a state they had
  already been in. For greedy evaluation of a policy that sees only the current state (``history_window: 0``)
  in a deterministic env, a revisit is a loop that lasts until ``max_turns``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Rollout success above which a policy counts as trained, and the invalid rate that then counts as collapse.
COLLAPSE_SUCCESS = 0.5
COLLAPSE_INVALID = 0.3


def group_signal(returns: torch.Tensor, traj_group: torch.Tensor) -> dict[str, float]:
    """Within-group spread of trajectory returns.

    Args:
        returns: (T,) float, the return of each trajectory.
        traj_group: (T,) int64, the episode group of each trajectory.
    Returns:
        ``rollout/group_return_std``: the mean over groups of the (population) std of their returns;
        ``rollout/flat_groups``: the share of groups whose returns are all equal (episode advantage 0).
    """
    import torch

    _, group = torch.unique(traj_group, return_inverse=True)
    n = int(group.max()) + 1 if group.numel() else 0
    if n == 0:
        return {"rollout/group_return_std": 0.0, "rollout/flat_groups": 0.0}
    r = returns.double()
    count = torch.zeros(n, dtype=torch.float64).index_add_(0, group, torch.ones_like(r))
    mean = torch.zeros(n, dtype=torch.float64).index_add_(0, group, r) / count
    var = torch.zeros(n, dtype=torch.float64).index_add_(0, group, (r - mean[group]).square()) / count
    lo = torch.full((n,), float("inf"), dtype=torch.float64).scatter_reduce(0, group, r, "amin")
    hi = torch.full((n,), float("-inf"), dtype=torch.float64).scatter_reduce(0, group, r, "amax")
    return {
        "rollout/group_return_std": var.sqrt().mean().item(),
        "rollout/flat_groups": (lo == hi).double().mean().item(),
    }


def logprob_gap(sampled: torch.Tensor, rescored: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``rollout/logprob_gap``: max |sampled - rescored| over real tokens; shapes (N, R), mask (N, R) bool."""
    if not bool(mask.any()):
        return {"rollout/logprob_gap": 0.0}
    gap = (sampled.float() - rescored.float()).abs()[mask]
    return {"rollout/logprob_gap": gap.max().item()}


def token_entropy(entropy: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``rollout/entropy``: the sampling policy's mean per-token entropy; entropy (N, R), mask (N, R) bool."""
    m = mask.to(entropy.dtype)
    return {"rollout/entropy": ((entropy * m).sum() / m.sum().clamp_min(1.0)).item()}


class CollapseCounter:
    """Counts collapsed iterations: after rollout success first passed ``COLLAPSE_SUCCESS``, each iteration
    whose invalid-action rate is above ``COLLAPSE_INVALID``. Its state is checkpointed (``state``)."""

    def __init__(self) -> None:
        self.trained = False
        self.count = 0

    def update(self, success_rate: float, invalid_rate: float) -> dict[str, float]:
        if self.trained and invalid_rate > COLLAPSE_INVALID:
            self.count += 1
        self.trained = self.trained or success_rate > COLLAPSE_SUCCESS
        return {"rollout/collapses": float(self.count)}

    def state(self) -> dict[str, int | bool]:
        return {"trained": self.trained, "count": self.count}

    def load(self, state: dict) -> None:
        self.trained = bool(state.get("trained", False))
        self.count = int(state.get("count", 0))


def revisit_rate(episode: torch.Tensor, state_ids: torch.Tensor, episodes: int) -> float:
    """The share of ``episodes`` that visited some state twice (the mean of ``revisits``; 0 with none).

    Args:
        episode: (M,) int64, the episode of each step row; state_ids: (M,) int64, the state before that step.
    """
    if episodes == 0:
        return 0.0
    return revisits(episode, state_ids, episodes).double().mean().item()


def revisits(episode: torch.Tensor, state_ids: torch.Tensor, episodes: int) -> torch.Tensor:
    """(episodes,) bool: which episodes visited some state twice (an episode without rows: False).

    Args:
        episode: (M,) int64, the episode of each step row; state_ids: (M,) int64, the state before that step.
    """
    import torch

    if episode.numel() == 0:
        return torch.zeros(episodes, dtype=torch.bool)
    pairs = episode * (int(state_ids.max()) + 1) + state_ids
    unique_pairs = torch.unique(pairs)
    distinct = torch.bincount(unique_pairs // (int(state_ids.max()) + 1), minlength=episodes)
    steps = torch.bincount(episode, minlength=episodes)
    return steps > distinct
