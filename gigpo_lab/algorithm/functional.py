"""``compute_advantages``: the stable functional entry point (one code path with the estimator objects)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.registry import build_estimator
from gigpo_lab.batch import StepBatch


def compute_advantages(
    name: str,
    *,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor | None = None,
    anchor_ids: torch.Tensor | None = None,
    invalid: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    anchor_texts: Sequence[str] | None = None,
    values: torch.Tensor | None = None,
    **params: object,
) -> torch.Tensor:
    """Advantages of the registered estimator ``name`` for N step rows, in any order.

    Args:
        name: a registered estimator (``grpo``, ``rloo``, ``reinforce_pp``, ``gigpo``, ``gigpo_step_index``,
            ``hgpo``, ``graphgpo``, ``ppo``).
        rewards: (N,) float32 or float64, the env reward of each step.
        group_ids, traj_ids: (N,) int, arbitrary int64 values; a trajectory belongs to one group.
        step_ids: (N,) int, 0..T-1 within each trajectory (gigpo, gigpo_step_index).
        anchor_ids: (N,) int, equal id = same state (gigpo).
        invalid: (N,) bool, the action text could not be parsed (absent: no invalid rows).
        truncated: (N,) bool, true on the last row of an episode cut by the time limit (gigpo with
            ``bootstrap_truncated``).
        anchor_texts: N str (gigpo with ``anchor_similarity_threshold``).
        values: (N,) float, the critic's V(s_t) of each row (ppo).
        **params: the estimator's parameters, e.g. ``step_advantage_weight=0.6``.
    Returns:
        (N,) tensor in the dtype of ``rewards``.

    Example::

        adv = compute_advantages("gigpo", rewards=r, group_ids=g, traj_ids=j, step_ids=t, anchor_ids=a,
                                 invalid=bad, gamma=0.95, mode="mean_std_norm")
    """
    estimator = build_estimator(name, **params)
    batch = StepBatch(
        rewards=rewards,
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_ids=step_ids,
        anchor_ids=anchor_ids,
        invalid=invalid,
        truncated=truncated,
        anchor_texts=None if anchor_texts is None else list(anchor_texts),
        values=values,
    )
    return estimator(batch).advantages
