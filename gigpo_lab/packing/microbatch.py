"""Micro-batched scoring and updates: the numbers of one whole-minibatch pass, in bounded memory.

One forward (and backward) over a whole minibatch keeps the activations of every row at once, every row padded
to the longest prompt of the iteration. Here the rows go through the model a few at a time (``size`` rows, the
config key ``trainer.micro_batch_size``), shortest first, and each chunk drops the columns that are padding in
all of its rows, as verl's ``log_prob_micro_batch_size`` / ``ppo_micro_batch_size`` (with ``use_dynamic_bsz``
length balancing) and TRL's ``per_device_train_batch_size`` with gradient accumulation do::

    minibatch (". " = padding)              chunks of 2 rows, shortest first, all-padding columns dropped
    a  [. . . . p p p | r r . . .]        chunk 0 = a, b:   a  [. p p p | r r .]
    b  [. . . p p p p | r r r . .]                          b  [p p p p | r r r]
    c  [. p p p p p p | r r r r .]        chunk 1 = c, d:   c  [. p p p p p p | r r r r .]
    d  [p p p p p p p | r r r r r]                          d  [p p p p p p p | r r r r r]

Positions come from the masks (``Policy.logprobs``), so dropping padding changes no row's log-probs beyond
float rounding. The loss of a minibatch is reconstructed exactly: a chunk's loss is weighted by its share of the
aggregation's units (tokens for ``token-mean``, non-empty rows for the ``seq-mean-*`` modes), so the weighted
sum of the chunks' losses, and of their gradients, is the whole minibatch's. Rows that repeat another row
(same prompt and response) are computed once and indexed back (``distinct_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from gigpo_lab.algorithm.loss import LossOutput, PolicyLoss
from gigpo_lab.batch import StepBatch
from gigpo_lab.packing.distinct_rows import distinct_rows as base_distinct_rows
from gigpo_lab.packing.shared_prefix import (
    common_prompt_prefix,
    prefix_sorted_chunks,
    shared_prefix_logprobs,
)

#: prompt_ids, prompt_mask, response_ids, response_mask, and allowed_tokens when the rows have it
#: (``StepBatch.token_columns``).
Columns = tuple[torch.Tensor, ...]

#: The units each loss aggregation averages over, per row (N,) from the response mask (N, R): a chunk's loss
#: weighs its units' share of the minibatch's (see ``gigpo_lab.algorithm.loss.aggregate``).
AGGREGATION_UNITS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "token-mean": lambda mask: mask.sum(1).float(),
    "seq-mean-token-mean": lambda mask: (mask.sum(1) > 0).float(),
    "seq-mean-token-sum": lambda mask: (mask.sum(1) > 0).float(),
}


def trim_padding(prompt_ids, prompt_mask, response_ids, response_mask, *allowed) -> Columns:
    """The four row columns without the prompt columns that no row uses (left padding) and the response
    columns that no row uses (right padding); at least one column of each is kept. ``allowed`` (the optional
    (n, V) allowed_tokens) is passed through.

    Shapes: (n, P) and (n, R) in, (n, P') and (n, R') out with P' <= P, R' <= R.
    """
    used_p = prompt_mask.any(0).nonzero()
    first = int(used_p[0]) if len(used_p) else prompt_mask.shape[1] - 1
    used_r = response_mask.any(0).nonzero()
    width = int(used_r[-1]) + 1 if len(used_r) else 1
    return (
        prompt_ids[:, first:],
        prompt_mask[:, first:],
        response_ids[:, :width],
        response_mask[:, :width],
        *allowed,
    )


def length_sorted_chunks(
    prompt_mask: torch.Tensor, response_mask: torch.Tensor, size: int
) -> list[torch.Tensor]:
    """Row indices (int64) in chunks of ``size`` rows, rows ordered by real length (prompt + response tokens,
    stable), so that each chunk pads to a length close to its own rows'. ``size`` <= 0: one chunk of all
    rows."""
    n = prompt_mask.shape[0]
    if n == 0:
        return []
    order = torch.sort(prompt_mask.sum(1) + response_mask.sum(1), stable=True).indices
    return list(order.split(n if size <= 0 else size))


def distinct_rows(columns: Sequence[torch.Tensor], enabled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The first row of each distinct (prompt, response) row, (U,) int64, and each row's distinct index (N,).

    A collection batch repeats rows (the G envs of a group start from the same observation and often answer
    alike); such rows have the same log-probs, so they go through the model once. ``enabled=False``: every
    row is its own (U = N, both the identity).
    """
    if not enabled:
        rows = torch.arange(len(columns[0]), device=columns[0].device)
        return rows, rows
    return base_distinct_rows(*columns)


def _chunking(model, rows: Sequence[torch.Tensor], size: int, shared_prefix: bool, max_tokens: int = 0):
    """The chunks of ``rows`` (the four columns) and the function that scores a chunk: length-sorted chunks and
    ``model.logprobs``, or prompt-sorted chunks (at most ``max_tokens`` packed tokens each, if > 0) and
    ``shared_prefix_logprobs``."""
    if shared_prefix:
        chunks = prefix_sorted_chunks(rows[0], rows[1], size, max_tokens, rows[3].sum(1))
        return chunks, lambda *c, temperature, past=None: shared_prefix_logprobs(
            model, *c, temperature=temperature, past=past
        )
    return length_sorted_chunks(rows[1], rows[3], size), model.logprobs


def _opening(model, rows: Sequence[torch.Tensor], chunks: list, shared_prefix: bool, device: torch.device):
    """With shared prefixes and several chunks: per layer the keys and values of the prompt opening that every
    row shares (``common_prompt_prefix``), run once on ``device`` for all chunks; else None."""
    if not shared_prefix or len(chunks) < 2:
        return None
    opening = common_prompt_prefix(rows[0], rows[1])
    return None if opening is None else model.prefix_kv(opening.to(device))


@torch.no_grad()
def chunked_logprobs(
    scorer,
    columns: Sequence[torch.Tensor],
    size: int,
    temperature: float,
    device: torch.device,
    shared_prefix: bool = False,
    max_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``scorer.logprobs`` of all rows: each distinct row once, ``size`` rows a forward, padding trimmed per
    chunk.

    Args:
        scorer: anything with ``Policy.logprobs`` (the policy, or the frozen reference).
        columns: prompt_ids, prompt_mask (N, P); response_ids, response_mask (N, R); optionally
            allowed_tokens (N, V) (``StepBatch.token_columns``); on the CPU.
        shared_prefix: chunks of prompt-sorted rows, each chunk's common prompt prefix run once
            (``gigpo_lab.packing.shared_prefix``; the scorer must be a ``Policy``).
        max_tokens: with ``shared_prefix``, the most packed tokens a chunk may have (0 = rows only).
    Returns:
        logp and entropy (N, R) float32 on the CPU, 0 where masked (as ``Policy.logprobs``).
    """
    first, inverse = distinct_rows(columns)
    distinct = [c[first] for c in columns]
    logp = torch.zeros((len(first), columns[2].shape[1]), dtype=torch.float32)
    entropy = torch.zeros_like(logp)
    chunks, logprobs = _chunking(scorer, distinct, size, shared_prefix, max_tokens)
    opening = _opening(scorer, distinct, chunks, shared_prefix, device)
    for idx in chunks:
        chunk = trim_padding(*(c[idx] for c in distinct))
        past = {"past": opening} if opening is not None else {}
        chunk_logp, chunk_entropy = logprobs(*(c.to(device) for c in chunk), temperature=temperature, **past)
        width = chunk_logp.shape[1]
        logp[idx, :width] = chunk_logp.to(logp)
        entropy[idx, :width] = chunk_entropy.to(logp)
    return logp[inverse], entropy[inverse]


def microbatched_loss(
    policy,
    loss_fn: PolicyLoss,
    mb: StepBatch,
    size: int,
    temperature: float,
    backward: Callable[[torch.Tensor], None],
    distinct: bool = True,
    shared_prefix: bool = False,
    max_tokens: int = 0,
) -> tuple[torch.Tensor, LossOutput]:
    """The loss of minibatch ``mb`` over chunks of ``size`` distinct rows, with gradient accumulation.

    Repeated rows (same prompt and response) go through the model once; each of them still has its own
    advantage and old log-probs in the loss (autograd sums their gradients). Every chunk but the last is
    back-propagated here (``backward``); the last chunk's weighted loss is returned for the caller's backward,
    so that after it the gradients equal those of the whole-minibatch loss.

    Args:
        policy: the trained ``Policy``. loss_fn: the configured loss (its ``aggregation`` picks the weights).
        mb: the minibatch (N rows) with old_logprobs, advantages and (optional) ref_logprobs, on the device.
        backward: back-propagates one chunk's weighted loss (Lightning's strategy, or ``Tensor.backward``).
        distinct: compute each distinct row once (``trainer.distinct_rows``); False: every row.
        shared_prefix: chunks of prompt-sorted rows, each chunk's common prompt prefix run once
            (``trainer.shared_prefix``, ``gigpo_lab.packing.shared_prefix``).
        max_tokens: with ``shared_prefix``, the most packed tokens a chunk may have
            (``trainer.shared_prefix_tokens``; 0 = rows only).
    Returns:
        the last chunk's weighted loss (0-dim, with grad), and the whole minibatch's ``LossOutput``
        (detached).
    """
    try:
        units = AGGREGATION_UNITS[loss_fn.aggregation](mb.response_mask)
    except KeyError:
        raise ValueError(
            f"loss.aggregation={loss_fn.aggregation!r} has no micro-batch weights; "
            f"known: {list(AGGREGATION_UNITS)}"
        ) from None
    tokens = mb.response_mask.sum(1).float()
    total_units, total_tokens = units.sum().clamp_min(1.0), tokens.sum().clamp_min(1.0)
    columns = mb.token_columns()
    first, inverse = distinct_rows(columns, distinct)
    rows_once = [c[first] for c in columns]
    chunks, logprobs = _chunking(policy, rows_once, size, shared_prefix, max_tokens)
    # the prompt opening every row shares runs once: the chunks before the last read detached copies of its
    # keys and values (their gradients gather there and are pushed through the opening once at the end); the
    # last chunk reads the opening itself, so the caller's backward of the returned loss completes it
    opening = _opening(policy, rows_once, chunks, shared_prefix, rows_once[0].device)
    copies = None
    if opening is not None:
        copies = [tuple(t.detach().requires_grad_() for t in pair) for pair in opening]
    sums = dict.fromkeys(("loss", "pg_loss", "kl", "entropy", "clipfrac", "approx_kl"), 0.0)
    weighted = None
    for k, idx in enumerate(chunks):
        chunk = trim_padding(*(c[idx] for c in rows_once))
        width = chunk[2].shape[1]
        past = {} if opening is None else {"past": opening if k + 1 == len(chunks) else copies}
        chunk_logp, chunk_entropy = logprobs(*chunk, temperature=temperature, **past)
        # the minibatch rows whose distinct row is in this chunk, and where in the chunk it is
        place = torch.full((len(first),), -1, dtype=torch.long, device=idx.device)
        place[idx] = torch.arange(len(idx), device=idx.device)
        rows = (place[inverse] >= 0).nonzero().squeeze(1)
        at = place[inverse[rows]]
        ref = mb.ref_logprobs[rows, :width] if mb.ref_logprobs is not None else None
        out = loss_fn(
            chunk_logp[at],
            mb.old_logprobs[rows, :width],
            mb.advantages[rows],
            mb.response_mask[rows, :width],
            chunk_entropy[at],
            ref,
        )
        share = (units[rows].sum() / total_units).to(out.loss.dtype)
        token_share = (tokens[rows].sum() / total_tokens).to(out.loss.dtype)
        weighted = out.loss * share
        for key in ("loss", "pg_loss", "kl", "entropy"):
            sums[key] = sums[key] + getattr(out, key).detach() * share
        for key in ("clipfrac", "approx_kl"):  # token means, whatever the aggregation
            sums[key] = sums[key] + getattr(out, key).detach() * token_share
        if k + 1 < len(chunks):
            backward(weighted)
    if weighted is None:
        raise ValueError("an empty minibatch has no loss")
    if copies is not None:
        _through_opening(opening, copies)
    return weighted, LossOutput(**{k: torch.as_tensor(v) for k, v in sums.items()})


def _through_opening(opening: list, copies: list) -> None:
    """Back-propagate the gradients gathered on the detached ``copies`` of the opening's keys and values through
    the opening's own graph, keeping it for the last chunk's backward."""
    pairs = [
        (tensor, copy.grad)
        for tensors, detached in zip(opening, copies, strict=True)
        for tensor, copy in zip(tensors, detached, strict=True)
        if copy.grad is not None
    ]
    if pairs:
        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs], retain_graph=True)
