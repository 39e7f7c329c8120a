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

from gigpo_lab.policy.base import distinct_rows

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
