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

The config group ``group_filter`` selects a rule (``none``, the default, ``nonconstant``, ``top_std``): the
classes below are its options' targets. A rule's ``keep`` reads one collection (its env returns, before reward
clipping, bonus or KL, as DAPO's ``acc`` and RAGEN's ``original_rm_scores`` are the task's own score) and
``max_collections`` says how many collections of B groups an iteration may spend to fill its batch
(``gigpo_lab/rollout/filtering.py`` runs the loop; ALGORITHMS.md section 14).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import segment_count, segment_min, segment_sum
from gigpo_lab.algorithm.settings import Configured, param


def episode_returns(rewards: torch.Tensor, traj: torch.Tensor, n_traj: int) -> torch.Tensor:
    """Each trajectory's undiscounted return. rewards: (N,) float; traj: (N,) int64 in 0..n_traj-1.
    Returns (n_traj,) float64."""
    return segment_sum(rewards.double(), traj, n_traj)


def group_return_std(returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
    """The unbiased std of each group's episode returns, 0 for a group of one episode.

    returns: (n_traj,) float64; group_of_traj: (n_traj,) int64 dense group ids in 0..n_groups-1.
    Returns (n_groups,) float64.
    """
    import torch

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
    import torch

    k = std.numel()
    order = torch.sort(-std, stable=True).indices  # descending std, stable among equal stds
    keep = torch.zeros(k, dtype=torch.bool, device=std.device)
    keep[order[: int(share * k)]] = True
    return keep


@dataclass
class NoFilterConfig:
    """No group filter: every collected group is trained on (the published algorithms)."""

    _target_: str = "gigpo_lab.algorithm.group_filter.NoFilter"


class NoFilter:
    """``group_filter=none``: every collected group is trained on, as the published algorithms do."""

    max_collections = 1
    fills_batch = False

    def keep(self, returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
        import torch

        return torch.ones(n_groups, dtype=torch.bool)


@dataclass
class NonConstantConfig:
    """DAPO's dynamic sampling: drop the groups whose episode returns are all equal, collect more to fill B."""

    _target_: str = "gigpo_lab.algorithm.group_filter.NonConstant"
    #: Collections of rollout.groups groups an iteration may spend, the first included (verl's DAPO
    #: max_num_gen_batches, 10 in its docs/algo/dapo.md). Once spent, the earliest dropped groups fill the
    #: batch (verl raises instead). Every collected env step counts toward trainer.max_env_steps.
    max_collections: int = param(10, low=1)


class NonConstant(Configured):
    """``group_filter=nonconstant``: DAPO's dynamic sampling (module docstring).

    The iteration collects B groups at a time until B groups pass the rule or ``max_collections`` collections
    (the first included: verl's ``max_num_gen_batches``) are spent; the batch is the first B passing groups in
    collection order. Where verl raises once the cap is spent, the lab fills the rest of the batch with the
    earliest groups that failed (the batch always has B groups; ``rollout/groups_refilled`` counts them).

    Parameters: ``NonConstantConfig``.
    """

    fills_batch = True

    schema = NonConstantConfig
    owner = "group_filter."

    def keep(self, returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
        return keep_nonconstant(returns, group_of_traj, n_groups)


@dataclass
class TopStdConfig:
    """RAGEN's StarPO-S filter: train on the share of groups of largest return std; never collects more."""

    _target_: str = "gigpo_lab.algorithm.group_filter.TopStd"
    #: p: int(p * rollout.groups) groups are kept, those of largest return std (RAGEN's
    #: rollout_filter_ratio, 0.25 in its config/base.yaml); int(p * rollout.groups) must be >= 1.
    share: float = param(0.25, low=0.0, high=1.0, low_open=True)


class TopStd(Configured):
    """``group_filter=top_std``: RAGEN's StarPO-S filter (module docstring): of one collection of B groups,
    the ``int(share * B)`` of largest return std are trained on, the others dropped; never collects more.

    Parameters: ``TopStdConfig``.
    """

    max_collections = 1
    fills_batch = False

    schema = TopStdConfig
    owner = "group_filter."

    def keep(self, returns: torch.Tensor, group_of_traj: torch.Tensor, n_groups: int) -> torch.Tensor:
        return keep_top_std(group_return_std(returns, group_of_traj, n_groups), self.share)


#: ``"group_filter/<option>"`` -> schema (stored as ``schema/group_filter/<option>``).
SCHEMAS: dict[str, type] = {
    "group_filter/none": NoFilterConfig,
    "group_filter/nonconstant": NonConstantConfig,
    "group_filter/top_std": TopStdConfig,
}
