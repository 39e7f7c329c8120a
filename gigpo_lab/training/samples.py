"""Sample trajectories for the logs: a few trajectories of an iteration's batch as JSON-able rows, which the
tracking callback writes as ``samples/iteration_NNNNN.jsonl`` (``trainer.sample_every``)."""

from __future__ import annotations

import torch

from gigpo_lab.batch import StepBatch


def sample_rows(batch: StepBatch, tokenizer, trajectories: int = 2) -> list[dict]:
    """The rows of the first ``trajectories`` trajectories of ``batch``, in (trajectory, step) order: prompt
    and action text (decoded by ``tokenizer``), reward, invalid flag, advantage, and the critic's value when
    the batch has one."""
    keep = torch.isin(batch.traj_ids, batch.traj_ids.unique()[:trajectories])
    rows = keep.nonzero().squeeze(1).tolist()
    rows.sort(key=lambda i: (int(batch.traj_ids[i]), int(batch.step_ids[i])))
    return [
        {
            "traj": int(batch.traj_ids[i]),
            "step": int(batch.step_ids[i]),
            "prompt": tokenizer.decode(batch.prompt_ids[i][batch.prompt_mask[i]].tolist()),
            "action": tokenizer.decode(batch.response_ids[i][batch.response_mask[i]].tolist()),
            "reward": float(batch.rewards[i]),
            "invalid": bool(batch.invalid[i]) if batch.invalid is not None else False,
            "advantage": float(batch.advantages[i]),
            **({"value": float(batch.values[i])} if batch.values is not None else {}),
        }
        for i in rows
    ]
