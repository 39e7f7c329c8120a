"""The Lightning data side: one pass over the dataset is one training iteration.

Lightning drives the loop (``max_epochs`` = iterations). Each epoch, the DataLoader asks the dataset for a
fresh iterator; the iterator runs the iteration's rollout, scoring and advantages (through the module's
``prepare_iteration``) and then yields its K PPO epochs of shuffled minibatches. There is no hand-written
training loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset

from gigpo_lab.batch import StepBatch


class IterationDataset(IterableDataset):
    """Yields one iteration's minibatches per pass. ``prepare`` returns them as a list of StepBatch."""

    def __init__(self, prepare: Callable[[], list[StepBatch]]) -> None:
        super().__init__()
        self.prepare = prepare

    def __iter__(self) -> Iterator[StepBatch]:
        yield from self.prepare()


def iteration_loader(prepare: Callable[[], list[StepBatch]]) -> DataLoader:
    """A DataLoader over ``IterationDataset`` in the main process (the rollout needs the live policy)."""
    return DataLoader(IterationDataset(prepare), batch_size=None, collate_fn=_identity, num_workers=0)


def _identity(x):
    return x


def shuffled_minibatches(
    batch: StepBatch, epochs: int, minibatch_size: int, generator: torch.Generator
) -> list[StepBatch]:
    """K epochs over the N rows of ``batch``, each a fresh permutation split into minibatches of rows.

    The last minibatch of an epoch may be smaller. ``minibatch_size`` <= 0 means the whole batch.
    """
    n = len(batch)
    size = n if minibatch_size <= 0 else min(minibatch_size, n)
    out: list[StepBatch] = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        out.extend(batch.select(idx) for idx in perm.split(size))
    return out
