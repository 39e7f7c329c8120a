"""Trajectory layout and discounted step returns, vectorised over the whole batch.

G_t = r_t + gamma * G_{t+1}, backwards over each trajectory (verl-agent ``gigpo/core_gigpo.py``,
``compute_step_discounted_returns``; arXiv 2505.10978, eq. for the step-level return).

Layout. Step ids are 0..T-1 within each trajectory, so the position of a row in (traj, step) order is
``offset[traj] + step``: an O(N) permutation, no sort. Laid out that way, the rows of each trajectory
are contiguous and in time order::

    position   0    1    2  | 3    4    5    6  | 7    8
    row of     A0   A1   A2 | B0   B1   B2   B3 | C0   C1
    coef       g    g    0  | g    g    g    0  | g    0      g = gamma, 0 at each trajectory's last step

Scan. A reverse segmented linear recurrence solved by Hillis-Steele doubling: after level k,
``b_i = sum_{j < 2^k} (prod_{l < j} coef_{i+l}) r_{i+j}`` and ``a_i = prod_{l < 2^k} coef_{i+l}``; the
zero coefficient at a trajectory's end cuts every window that would cross it. ceil(log2 T_max) levels of
O(N) tensor ops give O(N log T_max). Why not the ``cumsum(r_t * gamma^-t)`` trick: gamma^-t overflows
(gamma = 0.01, t = 200 gives 1e400) and then loses everything to rounding. The scan only ever multiplies
numbers in [0, 1] and adds terms with non-negative weights, so it cannot overflow, underflow is harmless
(gamma^d -> 0 is the right limit) and the rounding error is that of a sum of at most T terms. gamma = 0
and gamma = 1 are exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import segment_count, segment_sum


class TrajectoryLayout(NamedTuple):
    """Where each row sits in (traj, step) order.

    position: (N,) int64, a permutation of 0..N-1 (row i goes to position[i]).
    length: (n_traj,) int64, T of each trajectory.
    """

    position: torch.Tensor
    length: torch.Tensor


def trajectory_layout(
    traj: torch.Tensor, step: torch.Tensor, n_traj: int, traj_ids: torch.Tensor
) -> TrajectoryLayout:
    """Check that step ids are 0..T-1 within each trajectory and return the (traj, step) layout.

    traj: (N,) int64 dense trajectory ids in 0..n_traj-1 (in the order of ``traj_ids``); step: (N,) int64;
    traj_ids: (N,) the original ids, for the error message. Raises ValueError naming the first bad
    trajectory (negative steps, gaps or duplicates).
    """
    import torch

    n = traj.numel()
    length = segment_count(traj, n_traj)
    in_range = (step >= 0) & (step < length.index_select(0, traj))
    if not bool(in_range.all()):
        _raise_bad_steps(traj, step, traj_ids, int(traj[(~in_range).nonzero()[0, 0]]))
    offset = torch.cumsum(length, 0) - length
    position = offset.index_select(0, traj) + step  # in 0..N-1 because 0 <= step < length
    # N rows on N positions: every position is taken exactly once iff no trajectory repeats a step,
    # and then each trajectory's steps are exactly 0..T-1 (T distinct values in [0, T)).
    if not bool((segment_count(position, n) == 1).all()):
        repeated = segment_count(position, n)[position] > 1
        _raise_bad_steps(traj, step, traj_ids, int(traj[repeated.nonzero()[0, 0]]))
    return TrajectoryLayout(position, length)


def _raise_bad_steps(traj: torch.Tensor, step: torch.Tensor, traj_ids: torch.Tensor, bad: int) -> None:
    rows = (traj == bad).nonzero().squeeze(1)
    steps = sorted(step[rows].tolist())
    shown = steps if len(steps) <= 20 else [*steps[:20], "..."]
    raise ValueError(
        f"step_ids must be 0..T-1 (contiguous, no duplicates) within each trajectory; "
        f"traj_id={int(traj_ids[rows[0]])} has {len(steps)} rows with step_ids {shown}"
    )


def discounted_returns(
    rewards: torch.Tensor, traj: torch.Tensor, layout: TrajectoryLayout, gamma: float
) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1} within each trajectory (see the module docstring).

    rewards: (N,) float, rows in any order; traj: (N,) int64 dense trajectory ids;
    layout: from ``trajectory_layout``. Returns (N,) in the rows' original order.
    """
    import torch

    position, length = layout
    n = rewards.numel()
    # Position of each trajectory's last row: its coefficient is 0 so no window crosses into the next.
    last = torch.cumsum(length, 0) - 1
    coef = torch.full((n,), float(gamma), dtype=rewards.dtype, device=rewards.device)
    coef[last] = 0.0
    b = torch.empty_like(rewards).scatter_(0, position, rewards)  # a permutation: no duplicates
    a = coef
    d, t_max = 1, int(length.max())
    while d < t_max:
        # b_i += a_i * b_{i+d};  a_i *= a_{i+d};  a_i = 0 past the end (the products are new tensors,
        # so the in-place writes never read a value they already overwrote).
        b[:-d] += a[:-d] * b[d:]
        a[:-d] = a[:-d] * a[d:]
        a[-d:] = 0.0
        d *= 2
    return b.index_select(0, position)


def truncated_tail(
    rewards: torch.Tensor,
    traj: torch.Tensor,
    step: torch.Tensor,
    layout: TrajectoryLayout,
    truncated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """The bootstrapped tail of the episodes that the time limit cut, to add to ``discounted_returns``.

    A trajectory j of T_j rows with a truncated row has an unseen future; its value is estimated as the
    discounted sum of its own mean step reward m_j forever, V_j = m_j / (1 - gamma), and row t gets
    gamma^(T_j - t) * V_j (partial-episode bootstrapping, Pardo et al. 2018, arXiv 1712.00378, with this
    critic-free value). Other trajectories get 0, and so does a cut one whose rewards are all 0.

    rewards: (N,) float; traj, step: (N,) int64 dense trajectory ids and step ids; layout: from
    ``trajectory_layout``; truncated: (N,) bool; gamma in [0, 1). Returns (N,) in the rows' order.
    """
    import torch

    length = layout.length  # (J,)
    n_traj = length.numel()
    mean = segment_sum(rewards, traj, n_traj) / length.to(rewards.dtype)  # (J,)
    cut = segment_sum(truncated.to(rewards.dtype), traj, n_traj) > 0  # (J,)
    value = torch.where(cut, mean / (1.0 - gamma), torch.zeros_like(mean))  # (J,)
    ahead = (length.index_select(0, traj) - step).to(rewards.dtype)  # (N,) T_j - t >= 1
    return torch.pow(torch.full_like(rewards, float(gamma)), ahead) * value.index_select(0, traj)
