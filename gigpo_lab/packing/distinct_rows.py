"""Each distinct row computed once: the one mechanism behind old/reference scoring and the update's forward.

A collection batch repeats rows: the G envs of a group start from the same observation and often answer
alike, and late in a FrozenLake 4x4 run a minibatch of 128 rows holds only a few dozen distinct (prompt,
response) pairs. Such rows have the same log-probs, so the model runs on one copy of each and the result is
indexed back to every row (``per_distinct_row``). Its two uses differ only in when it pays and what it must
keep exact:

- ``score_unique_rows`` (no grad, the old and reference log-probs): on the CPU a row's log-probs do not depend
  on the other rows of its batch, so with at least ``MIN_SCORED_ROWS`` rows it gives the very bits of the full
  batch. Used when at most half the rows are distinct.
- ``distinct_rows_logprobs`` (the update, differentiable): autograd's backward of the indexing adds up the
  gradients of the copies, so the loss and its gradient are the plain batch's up to float rounding (the sums
  run in another order; tests/packing/test_distinct_rows.py). Used when at most ``MAX_DISTINCT_SHARE`` of the
  rows are distinct.

``packing.microbatch`` deduplicates with ``distinct_rows`` before it cuts micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

#: The fewest rows a deduplicated scoring batch keeps. BLAS picks its kernels by matrix shape, and very small
#: row counts take other kernels than large ones (MKL: fewer than 4 rows), which round differently; with at
#: least 8 rows (so >= 8 rows in every matmul) a row's numbers do not depend on the batch it is scored in.
MIN_SCORED_ROWS = 8
#: Scoring (no grad): above this share of distinct rows the plain batch is cheaper than the gather.
MAX_SCORED_SHARE = 0.5
#: The update: above this share of distinct rows the plain batch is cheaper than the gather.
MAX_DISTINCT_SHARE = 0.75


def distinct_rows(*columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of ``columns`` (each (N, ...), read side by side as one row).

    Returns:
        first (U,) int64: the index of the first row of each distinct row, in the order of ``torch.unique``;
        inverse (N,) int64: for each row, its distinct row (``rows == rows[first][inverse]``).
    """
    key = torch.cat([(c.flatten(1) if c.dim() > 1 else c[:, None]).long() for c in columns], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    n = key.shape[0]
    first = torch.full((len(unique),), n, dtype=torch.long, device=key.device)
    first = first.scatter_reduce_(0, inverse, torch.arange(n, device=key.device), reduce="amin")
    return first, inverse


def per_distinct_row(
    score: Callable[..., tuple[torch.Tensor, ...]],
    columns: Sequence[torch.Tensor],
    *,
    max_share: float,
    min_rows: int = 0,
) -> tuple[torch.Tensor, ...]:
    """``score(*columns)`` for all N rows, computed on the U distinct rows and indexed back.

    Args:
        score: maps the columns ((n, ...) each) to a tuple of (n, ...) tensors, row for row.
        columns: (N, ...) each, read side by side as one row.
        max_share: with U > ``max_share`` · N the plain batch is scored instead (the gather does not pay).
        min_rows: the distinct batch is padded with copies of its first row to at least this many rows.
    Returns:
        score's tensors for all N rows; row i is row ``inverse[i]`` of the distinct batch.
    """
    first, inverse = distinct_rows(*columns)
    if len(first) > max_share * columns[0].shape[0]:
        return score(*columns)
    pad = max(0, min_rows - len(first))
    rows = torch.cat([first, first[:1].expand(pad)]) if pad else first
    return tuple(out[inverse] for out in score(*(c[rows] for c in columns)))


def score_unique_rows(
    model: Any, *columns: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.logprobs(...)`` (N, R) each, computed once per distinct row (no grad; old/reference scoring).

    Bit for bit the full batch's on the CPU (module docstring). On other devices (cuBLAS picks kernels,
    split-K among them, by shape) the full batch is scored as is.

    Args:
        model: anything with the ``Policy.logprobs`` signature (the policy or its frozen reference).
        columns: prompt_ids, prompt_mask (N, P) left-padded; response_ids, response_mask (N, R) right-padded.
    Returns:
        logp (N, R) float, 0 where masked; entropy (N, R) float, 0 where masked.
    """

    def score(*c):
        return model.logprobs(*c, temperature=temperature)

    if columns[0].device.type != "cpu" or columns[0].shape[0] <= MIN_SCORED_ROWS:
        return score(*columns)
    return per_distinct_row(score, columns, max_share=MAX_SCORED_SHARE, min_rows=MIN_SCORED_ROWS)


def distinct_rows_logprobs(
    model: Any, *columns: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.logprobs(...)`` for all N rows, computed on the U distinct rows (differentiable).

    Args:
        model: anything with the ``Policy.logprobs`` signature.
        columns: prompt_ids, prompt_mask (N, P) left-padded; response_ids, response_mask (N, R) right-padded.
    Returns:
        logp (N, R) and entropy (N, R), 0 where masked; row i is row ``inverse[i]`` of the distinct batch.
    """

    def score(*c):
        return model.logprobs(*c, temperature=temperature)

    return per_distinct_row(score, columns, max_share=MAX_DISTINCT_SHARE)
