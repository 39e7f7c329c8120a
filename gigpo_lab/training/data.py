"""The Lightning data side: one item per Lightning epoch, the index of the iteration that epoch runs.

``GiGPOModule.training_step`` runs the whole iteration itself (rollout, advantages, its K PPO epochs of
minibatches), so the data side carries nothing but the count: Lightning's loop gives one epoch per iteration
(``max_epochs`` = iterations), and checkpoints, resume and the epoch-end callbacks keep their meaning. This is the
loop of Lightning's own PPO example (``examples/fabric/reinforcement_learning/train_fabric.py``: ``for update in
range(...)``: collect, estimate, then epochs of minibatches), with Lightning counting the updates.

The index is read when the epoch fetches its item, not when Lightning creates the iterator: on resume Lightning
creates it before it has counted the checkpoint's finished epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from gigpo_lab.batch import StepBatch


class Iterations:
    """One item per pass, ``current()``: the index of the iteration the epoch runs. Sized, so Lightning
    prefetches nothing."""

    def __init__(self, current: Callable[[], int]) -> None:
        self.current = current

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[int]:
        yield self.current()


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
