"""The update's forward and backward once per distinct row, for batches that repeat rows.

A from-scratch policy on a small env answers the same word in the same state again and again: late in a
FrozenLake 4x4 run, a minibatch of 128 rows holds only a few dozen distinct (prompt, response) pairs. Those rows have
the same log-probs, so the policy runs on one copy of each and the result is indexed back to every row.
Autograd's backward of the indexing adds up the gradients of the copies, so the loss and its gradient
are the plain batch's, up to float rounding (the sums run in another order; tests/training/test_distinct_rows.py).
"""

from __future__ import annotations

from typing import Any

import torch

#: The fewest rows a deduplicated scoring batch keeps. BLAS picks its kernels by matrix shape, and very small
#: row counts take other kernels than large ones (MKL: fewer than 4 rows), which round differently; with at
#: least 8 rows (so >= 8 rows in every matmul) a row's numbers do not depend on the batch it is scored in.
MIN_SCORED_ROWS = 8


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


def score_unique_rows(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.logprobs(...)`` (N, R) each, computed once per distinct row (no grad; for old/reference scoring).

    A collection batch repeats rows: the G envs of a group often see the same state and answer the same
    word (FrozenLake 4x4 has 16 states). On the CPU a row's log-probs do not depend on the other rows of its
    batch (the row-wise ops are independent and each matmul output sums over the same features in the same
    order), so scoring the U distinct rows (at least ``MIN_SCORED_ROWS``) and indexing back gives the very
    bits of the full batch at U / N of the cost. On other devices (cuBLAS picks kernels, split-K among them,
    by shape) the full batch is scored as is.

    Args:
        model: anything with the ``Policy.logprobs`` signature (the policy or its frozen reference).
        prompt_ids / prompt_mask: (N, P) left-padded. response_ids / response_mask: (N, R) right-padded.
    Returns:
        logp (N, R) float, 0 where masked; entropy (N, R) float, 0 where masked.
    """
    n = prompt_ids.shape[0]
    columns = (prompt_ids, prompt_mask, response_ids, response_mask)
    if prompt_ids.device.type != "cpu" or n <= MIN_SCORED_ROWS:
        return model.logprobs(*columns, temperature=temperature)
    first, inverse = distinct_rows(*columns)
    if len(first) * 2 > n:  # few repeats: not worth the gather
        return model.logprobs(*columns, temperature=temperature)
    pad = max(0, MIN_SCORED_ROWS - len(first))
    rows = torch.cat([first, first[:1].expand(pad)])  # padded with copies of one row: >= MIN_SCORED_ROWS
    logp, entropy = model.logprobs(*(c[rows] for c in columns), temperature=temperature)
    return logp[inverse], entropy[inverse]


#: Above this share of distinct rows the plain batch is cheaper than the gather.
MAX_DISTINCT_SHARE = 0.75


def distinct_rows_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.logprobs(...)`` for all N rows, computed on the U distinct rows (differentiable).

    Args:
        model: anything with the ``Policy.logprobs`` signature.
        prompt_ids / prompt_mask: (N, P) left-padded. response_ids / response_mask: (N, R) right-padded.
    Returns:
        logp (N, R) and entropy (N, R), 0 where masked; row i is row ``inverse[i]`` of the distinct batch.
    """
    columns = (prompt_ids, prompt_mask, response_ids, response_mask)
    first, inverse = distinct_rows(*columns)
    if len(first) > MAX_DISTINCT_SHARE * prompt_ids.shape[0]:
        return model.logprobs(*columns, temperature=temperature)
    logp, entropy = model.logprobs(*(c[first] for c in columns), temperature=temperature)
    return logp[inverse], entropy[inverse]
