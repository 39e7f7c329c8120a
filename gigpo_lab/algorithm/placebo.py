"""The placebo of GiGPO's step groups (``estimator.placebo=true``): the same group sizes, random members.

Within each episode group the step groups keep their sizes, and which rows share a group is drawn at
random, so a step group holds no state information. The rows keep their own step returns; only the
partition changes. Per episode group::

    step-group sizes, largest first        rows, in the order of their random keys
    {s1: 3, s2: 1, s3: 2} -> 3, 2, 1        r4 r0 r5 | r2 r1 | r3
                                           block 1     block 2  block 3

The first 3 rows by key form one group, the next 2 the second, the last one the third. The blocks are laid
out by size, not by anchor, so the result depends on the sizes alone: two batches that differ only in which
rows share an anchor (with the same sizes in every episode group) get the same groups under the same keys.
With keys drawn uniformly, every partition of a group's rows into blocks of those sizes is equally likely.

The keys are a pure function of the batch and ``seed`` (``placebo_keys``): a hash of each row's trajectory
id, step id, reward and invalid flag, taken in (trajectory, step) order, seeds a generator. So a run, a
resumed run and every rank of a distributed run draw the same groups for the same batch, the anchors never
enter the draw, and shuffling the rows of a batch shuffles the keys with them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def placebo_keys(
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    rewards: torch.Tensor,
    invalid: torch.Tensor,
    seed: int,
) -> torch.Tensor:
    """Uniform random keys (N,) float64 in [0, 1), one per row, on the rewards' device.

    traj_ids, step_ids: (N,) int; rewards: (N,) float; invalid: (N,) bool or 0/1. The draw is seeded by
    ``seed`` and a BLAKE2b hash of the four columns in (trajectory, step) order, so it does not depend on
    the row order (a row keeps its key wherever it sits) and never reads an anchor.
    """
    import torch

    device = rewards.device
    traj = traj_ids.to(torch.int64).cpu()
    step = step_ids.to(torch.int64).cpu()
    dense = torch.unique(traj, return_inverse=True)[1]
    order = torch.argsort(dense * (int(step.max()) + 1) + step)  # the rows in (trajectory, step) order
    digest = hashlib.blake2b(digest_size=8)
    digest.update(int(seed).to_bytes(8, "little", signed=True))
    for column in (traj, step, rewards.to(torch.float64).cpu(), invalid.to(torch.float64).cpu()):
        digest.update(column[order].numpy().tobytes())
    generator = torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") >> 1)
    keys = torch.empty(traj.numel(), dtype=torch.float64)
    keys[order] = torch.rand(traj.numel(), generator=generator, dtype=torch.float64)
    return keys.to(device)


def shuffle_step_groups(
    step_group: torch.Tensor, n_step_groups: int, group: torch.Tensor, keys: torch.Tensor
) -> torch.Tensor:
    """Step-group ids (N,) int64 in 0..S-1 with each episode group's sizes kept and its members re-drawn.

    step_group: (N,) int64 in 0..S-1, each step group inside one episode group; group: (N,) int64, the
    dense episode group of each row; keys: (N,) float, the random keys (``placebo_keys``). Vectorised: two
    sorts and a ``repeat_interleave``, no loop over rows or groups.
    """
    import torch

    n = step_group.numel()
    count = torch.bincount(step_group, minlength=n_step_groups)  # (S,)
    owner = torch.zeros(n_step_groups, dtype=torch.int64, device=group.device).scatter_(0, step_group, group)
    # the blocks of every episode group in a row, largest first: sort by (episode group, size descending)
    blocks = torch.argsort(owner * (n + 1) + (n - count), stable=True)
    slots = torch.repeat_interleave(blocks, count.index_select(0, blocks))  # (N,) the block of each slot
    # the rows of every episode group in a row, in the order of their keys
    by_key = torch.argsort(keys, stable=True)
    rows = by_key.index_select(0, torch.argsort(group.index_select(0, by_key), stable=True))
    return torch.empty_like(step_group).index_put_((rows,), slots)
