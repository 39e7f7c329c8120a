"""What a multi-process run (``trainer=ddp``, SLURM tasks) does differently from a single process.

* Only global rank 0 tracks: one job is one MLflow run. The rank must be known before the Trainer exists
  (the run opens first, so that a bad config still leaves a FAILED run), so it is read from the variables
  the launchers set: Lightning's relaunch (``LOCAL_RANK``, ``NODE_RANK``), torchrun (``RANK``), SLURM
  (``SLURM_PROCID``), LSF (``JSM_NAMESPACE_RANK``). ``train`` checks the guess against the Trainer's rank.
* Under FSDP the policy's weights are sharded over the ranks outside the FSDP forward; the rollouts, the
  scoring, the evaluation and the rollout engine's weight sync run there, so they run inside
  ``gathered_weights`` (every rank gathers the full weights for that span; a no-op without FSDP).
* An iteration's rollout metrics describe the whole job, not rank 0's share of it: counts are summed over the
  ranks and rates averaged (``across_ranks``), so ``rollout/env_steps_total`` and ``trainer.max_env_steps``
  count every rank's env steps and all ranks stop after the same iteration.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

#: Environment variables that hold a process's rank (global or within its node) under some launcher.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

#: Rollout metrics that are counts: the job's value is the sum over the ranks.
SUMMED = ("rollout/env_steps", "rollout/tokens", "rollout/env_errors")
#: Rollout metrics that are means over rows (env steps): averaged over the ranks weighted by their env steps.
#: The other ``rollout/*`` metrics are means over episodes, and every rank runs the same number of episodes.
ROW_WEIGHTED = ("rollout/invalid_rate",)


def is_launch_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """True unless a launcher marked this process as a rank other than 0 (any rank variable set and non-zero)."""
    env = os.environ if environ is None else environ
    return all(int(env.get(key) or 0) == 0 for key in RANK_VARIABLES)


def across_ranks(metrics: Mapping[str, float], strategy) -> dict[str, float]:
    """The job-wide value of every ``rollout/*`` metric of one rank's iteration (a collective: call on all ranks).

    Args:
        metrics: this rank's rollout metrics; must hold ``rollout/env_steps`` (the row weight).
        strategy: the Lightning strategy (``reduce`` is its all-reduce; a single process returns ``metrics``).

    Returns:
        ``metrics`` with ``SUMMED`` keys summed over ranks, ``ROW_WEIGHTED`` keys averaged weighted by each
        rank's env steps, and every other key averaged over the ranks. A NaN on any rank (no finished
        episode) makes that metric NaN for the job.
    """
    world = int(getattr(strategy, "world_size", 1))
    if world == 1:
        return dict(metrics)
    import torch

    keys = sorted(metrics)
    steps = float(metrics["rollout/env_steps"])
    local = [
        metrics[k] * steps if k in ROW_WEIGHTED else metrics[k] for k in keys
    ]  # row-weighted keys travel as sums over rows
    local_t = torch.tensor(local, dtype=torch.float64, device=strategy.root_device)
    total = strategy.reduce(local_t, reduce_op="sum").tolist()
    summed = dict(zip(keys, total, strict=True))
    all_steps = summed["rollout/env_steps"]
    out = {}
    for key in keys:
        if key in SUMMED:
            out[key] = summed[key]
        elif key in ROW_WEIGHTED:
            out[key] = summed[key] / all_steps if all_steps else float("nan")
        else:
            out[key] = summed[key] / world
    return out


def gathered_weights(root) -> contextlib.AbstractContextManager:
    """A context in which an FSDP-wrapped ``root`` holds its full, unsharded parameters (a collective: every
    rank enters it); for any other module, or None, a context that does nothing.

    ``torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params`` with ``writeback=False``: the
    gathered weights are read, never written back. The full weights are in each rank's memory for the span.
    """
    import torch

    if root is None or not torch.distributed.is_available():
        return contextlib.nullcontext()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if not isinstance(root, FSDP):
        return contextlib.nullcontext()
    return FSDP.summon_full_params(root, writeback=False, recurse=True)
