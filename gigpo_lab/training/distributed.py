"""What a multi-process run (``lightning=ddp``, SLURM tasks) does differently from a single process.

* Only global rank 0 tracks: one job is one MLflow run. The rank must be known before the Trainer exists
  (the run opens first, so that a bad config still leaves a FAILED run), so it is read from the variables
  the launchers set: Lightning's relaunch (``LOCAL_RANK``, ``NODE_RANK``), torchrun (``RANK``), SLURM
  (``SLURM_PROCID``), LSF and MPI (``RANK_VARIABLES``). ``train`` checks the guess against the Trainer's rank.
* An iteration's rollout metrics describe the whole job, not rank 0's share of it: counts are summed over the
  ranks and means weighted by their counts (``across_ranks``), so ``rollout/env_steps_total`` and
  ``trainer.max_env_steps`` count every rank's env steps and all ranks stop after the same iteration.
* The held-out evaluation is shared: rank r of W plays episodes r, r + W, r + 2W, ... (``episode_share``) and
  every rank gets the whole table back in episode order (``gather_episodes``), so W ranks spend 1/W of the
  evaluation each and log what one process would (each episode has its own sampling stream,
  ``gigpo_lab/training/evaluation.py``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Environment variables that hold a process's rank (global or within its node) under some launcher:
#: torchrun, Lightning's relaunch, SLURM, LSF, Open MPI, MPICH / Intel MPI, PMIx.
RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "SLURM_PROCID",
    "JSM_NAMESPACE_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
)

#: Rollout metrics that are counts: the job's value is the sum over the ranks.
SUMMED = (
    "rollout/env_steps",
    "rollout/tokens",
    "rollout/env_errors",
    "rollout/episodes",
    "rollout/groups_dropped",  # a group filter's counts (gigpo_lab/training/group_filtering.py)
    "rollout/groups_refilled",
    "rollout/extra_collections",
)
#: Rollout metrics that are means, and the count each is a mean over: the job's value is the mean weighted by
#: each rank's count (a rank with a count of 0, whose mean is NaN, has no weight). Any other metric is averaged
#: over the ranks unweighted, so one NaN makes it NaN.
WEIGHTED_BY = {
    "rollout/invalid_rate": "rollout/env_steps",
    "rollout/success_rate": "rollout/episodes",
    "rollout/return": "rollout/episodes",
    "rollout/length": "rollout/episodes",
}


def is_launch_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """True unless a launcher marked this process as a rank other than 0 (any rank variable set and non-zero)."""
    env = os.environ if environ is None else environ
    return all(int(env.get(key) or 0) == 0 for key in RANK_VARIABLES)


def across_ranks(metrics: Mapping[str, float], strategy) -> dict[str, float]:
    """The job-wide value of every ``rollout/*`` metric of one rank's iteration (a collective: call on all ranks).

    Args:
        metrics: this rank's rollout metrics (name -> float); every rank passes the same names.
        strategy: the Lightning strategy; its ``reduce`` all-reduces one float64 tensor of shape (K,), K =
            ``len(metrics)``. None or a single process returns ``metrics`` unchanged.

    Returns:
        ``metrics`` with ``SUMMED`` keys summed over the ranks, ``WEIGHTED_BY`` keys averaged weighted by their
        count (when the count is among ``metrics``), and every other key averaged over the ranks.
    """
    world = int(getattr(strategy, "world_size", 1))
    if world == 1:
        return dict(metrics)
    import torch

    keys = sorted(metrics)
    weight_of = {k: WEIGHTED_BY[k] for k in keys if WEIGHTED_BY.get(k) in metrics}
    local = []
    for key in keys:
        value = float(metrics[key])
        if key in weight_of:
            weight = float(metrics[weight_of[key]])
            value = value * weight if weight > 0 and math.isfinite(value) else 0.0  # a sum over the count
        local.append(value)
    local_t = torch.tensor(local, dtype=torch.float64, device=strategy.root_device)
    total = dict(zip(keys, strategy.reduce(local_t, reduce_op="sum").tolist(), strict=True))
    out = {}
    for key in keys:
        if key in SUMMED:
            out[key] = total[key]
        elif key in weight_of:
            count = total[weight_of[key]]
            out[key] = total[key] / count if count > 0 else float("nan")
        else:
            out[key] = total[key] / world
    return out


def world_of(strategy) -> tuple[int, int]:
    """(rank, world size) of a Lightning strategy; (0, 1) for None (a script without a Trainer)."""
    if strategy is None:
        return 0, 1
    return int(getattr(strategy, "global_rank", 0)), int(getattr(strategy, "world_size", 1))


def episode_share(episodes: int, rank: int, world: int) -> list[int]:
    """The held-out episodes rank ``rank`` of ``world`` plays: every world-th from its own rank (E = 5, W = 2:
    rank 0 plays 0, 2, 4; rank 1 plays 1, 3), so the shares differ by one episode at most."""
    return list(range(rank, episodes, world))


def gather_episodes(local: torch.Tensor, episodes: int, strategy) -> torch.Tensor:
    """The whole table of a shared evaluation, in episode order, on every rank (a collective: call on all ranks).

    Args:
        local: (S_r, K) this rank's rows, those of ``episode_share(episodes, rank, world)`` in order.
        episodes: E, the episodes of the whole evaluation.
        strategy: the Lightning strategy (``all_gather``); None or a single process returns ``local``.

    Returns:
        (E, K): row i is episode i's row, from the rank that played it. Each rank pads its rows to
        S = ceil(E / W) and ``all_gather`` stacks them (W, S, K); episode i is row i // W of rank i % W, so
        reading the stack slot by slot, (S, W, K) flattened, is episode order, the padding last::

            E = 5, W = 2   rank 0: e0 e2 e4     slot-major: e0 e1 | e2 e3 | e4 pad
                           rank 1: e1 e3 pad
    """
    _, world = world_of(strategy)
    if world == 1:
        return local
    import torch

    slots = -(-episodes // world)
    padded = torch.zeros(slots, local.shape[1], dtype=local.dtype)
    padded[: len(local)] = local
    stacked = strategy.all_gather(padded.to(strategy.root_device)).cpu()  # (W, S, K)
    return stacked.transpose(0, 1).reshape(slots * world, -1)[:episodes]


def check_world_size(loop, world_size: int, shared_prefix: bool) -> bool:
    """Refuse the ``trainer`` settings that a run of ``world_size`` > 1 processes cannot honour, each with its
    fix; return ``shared_prefix`` as it applies (a null-resolved true is turned off with several processes).
    ``loop`` is the ``TrainerConfig``."""
    if world_size <= 1:
        return shared_prefix
    if loop.target_kl is not None:
        # a rank that stops early would leave the others waiting in the gradient all-reduce
        raise ValueError(
            f"trainer.target_kl={loop.target_kl} with {world_size} processes: the ranks would "
            "stop after different numbers of optimizer steps and hang; set trainer.target_kl=null"
        )
    if loop.minibatch_size > 0:
        # ranks collect different numbers of rows, so row-sized minibatches give them different numbers of
        # optimizer steps, and DDP would hang or pair gradients of different steps
        raise ValueError(
            f"trainer.minibatch_size={loop.minibatch_size} with {world_size} processes: set "
            "trainer.minibatch_size=0 (one step per PPO epoch on every rank), as lightning=ddp does"
        )
    if loop.micro_batch_size > 0:
        # several backward passes per step would each fire DDP's gradient all-reduce hooks
        raise ValueError(
            f"trainer.micro_batch_size={loop.micro_batch_size} with {world_size} processes is "
            "not supported: set trainer.micro_batch_size=0"
        )
    if shared_prefix and loop.shared_prefix:
        # packed chunks are bounded by tokens, so the ranks would run different numbers of backward passes
        raise ValueError(
            f"trainer.shared_prefix=true with {world_size} processes is not supported: set "
            "trainer.shared_prefix=false (or null, which is off with several processes)"
        )
    return False
