"""``across_ranks`` on a real 2-process gloo group: sums, count-weighted means, and ranks with nothing finished.

The strategy passed in is the smallest object with what ``across_ranks`` uses (``world_size``, ``root_device``,
``reduce``), its ``reduce`` a real ``torch.distributed.all_reduce``; the Lightning path is covered by
``tests/training/test_ddp.py``.
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gigpo_lab.training.distributed import across_ranks

RANK_METRICS = [
    # rank 0: every episode failed in the env, so its episode means are NaN and carry no weight
    {
        "rollout/success_rate": math.nan,
        "rollout/return": math.nan,
        "rollout/length": math.nan,
        "rollout/episodes": 0.0,
        "rollout/invalid_rate": 0.5,
        "rollout/env_steps": 10.0,
        "rollout/tokens": 30.0,
        "rollout/env_errors": 4.0,
        "custom/score": 1.0,
    },
    {
        "rollout/success_rate": 0.25,
        "rollout/return": 2.0,
        "rollout/length": 7.5,
        "rollout/episodes": 4.0,
        "rollout/invalid_rate": 0.2,
        "rollout/env_steps": 30.0,
        "rollout/tokens": 90.0,
        "rollout/env_errors": 0.0,
        "custom/score": 3.0,
    },
]


class GlooSum:
    """world_size, root_device and a sum all-reduce over the default process group."""

    world_size = 2
    root_device = torch.device("cpu")

    def reduce(self, tensor, reduce_op):
        assert reduce_op == "sum"
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor


def _worker(rank: int, folder: str) -> None:
    # a rendezvous file, not a port: a port found free before the spawn may be taken by the time ranks bind it
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    try:
        torch.save(across_ranks(RANK_METRICS[rank], GlooSum()), os.path.join(folder, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_job_metrics_are_sums_and_count_weighted_means(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path),), nprocs=2)
    job0, job1 = (torch.load(tmp_path / f"{r}.pt") for r in (0, 1))
    assert job0 == job1, "every rank gets the job's values"
    assert (job0["rollout/env_steps"], job0["rollout/tokens"], job0["rollout/env_errors"]) == (
        40.0,
        120.0,
        4.0,
    )
    assert job0["rollout/episodes"] == 4.0
    # the rank with no finished episode does not turn the job's episode means into NaN
    assert (job0["rollout/success_rate"], job0["rollout/return"], job0["rollout/length"]) == (0.25, 2.0, 7.5)
    assert (
        job0["rollout/invalid_rate"] == (0.5 * 10 + 0.2 * 30) / 40
    )  # weighted by env steps, not (0.5+0.2)/2
    assert job0["custom/score"] == 2.0  # a metric without a known count: the plain mean over ranks


def test_one_process_returns_its_metrics_unchanged():
    assert across_ranks(RANK_METRICS[1], None) == RANK_METRICS[1]
