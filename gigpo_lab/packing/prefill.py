"""Prefill with shared work: identical prompts are run once, and the longest common prefix of the distinct
prompts is run once for all of them.

In a collection batch the G envs of a group start from the same observation (identical turn-0 prompts), and
every HF prompt opens with the same system prompt. For U distinct prompts with a common prefix of L tokens::

    prefix   [p0 .. pL-1]                one row, then its cache is copied to the U rows
    suffixes [pad pad s s s]             U rows, left-padded to the longest suffix, attending to the prefix
             [pad s s s s]
    rows     N rows pick their distinct prompt's cache and last logits (``select_cache``)

The returned attention mask is ``[1]*L + suffix mask`` per row, not the input's left-padded layout; positions
come from the mask (``cumsum - 1``), so every token keeps the position it has in the plain layout.
"""

from __future__ import annotations

from typing import Any

import torch

from gigpo_lab.packing.padding import left_pad, unpadded
from gigpo_lab.packing.prefix_tree import packed_tree, prefix_tree


def common_prefix_length(ids: torch.Tensor, lengths: torch.Tensor) -> int:
    """Tokens shared by the starts of all rows of the left-padded ``ids`` (U, P) with real ``lengths`` (U,),
    capped so that each row keeps at least one token of its own."""
    shortest = int(lengths.min())
    width = ids.shape[1]
    starts = (width - lengths)[:, None] + torch.arange(shortest - 1, device=ids.device)
    heads = ids.gather(1, starts)
    same = (heads == heads[:1]).all(0)
    return int(same.long().cumprod(0).sum())


def shared_prefill(
    policy: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    min_prefix: int = 1,
    keep_cache: bool = True,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Fill the cache for N prompts.

    Args:
        prompt_ids: (N, P) int64, left-padded. prompt_mask: (N, P) bool.
        min_prefix: the shortest common prefix worth a separate forward.
        keep_cache: False when no token follows (a one-token response): the cache is not copied out to the
            N rows and None is returned in its place.
    Returns:
        logits (N, V) of each prompt's next token, the cache (N rows), and the attention mask (N, S) bool over
        the cached tokens, to extend with the generated ones.
    """
    n, width = prompt_ids.shape
    unique_key, inverse = torch.unique(
        torch.cat([prompt_ids, prompt_mask.long()], 1), dim=0, return_inverse=True
    )
    if len(unique_key) < n:
        ids, mask = unique_key[:, :width], unique_key[:, width:].bool()
    else:  # all distinct: keep the input order
        ids, mask, inverse = prompt_ids, prompt_mask, None
    lengths = mask.sum(1)
    shared = common_prefix_length(ids, lengths) if len(ids) > 1 else 0
    if shared >= min_prefix:
        prefix = ids[:1, width - int(lengths[0]) : width - int(lengths[0]) + shared]
        _, cache = policy.forward_logits(
            prefix, torch.ones_like(prefix, dtype=torch.bool), None, logits_to_keep=1
        )
        cache = policy.select_cache(cache, torch.zeros(len(ids), dtype=torch.long, device=ids.device))
        suffix_width = int(lengths.max()) - shared
        own = torch.arange(width, device=ids.device) >= (width - lengths + shared)[:, None]
        mask = torch.cat(
            [torch.ones(len(ids), shared, dtype=torch.bool, device=ids.device), own[:, -suffix_width:]], 1
        )
        logits, cache = policy.forward_logits(ids[:, -suffix_width:], mask, cache, logits_to_keep=1)
    else:
        logits, cache = policy.forward_logits(ids, mask, None, logits_to_keep=1)
    if not keep_cache:
        cache = None
    elif inverse is not None:
        cache = policy.select_cache(cache, inverse)
    if inverse is not None:
        logits, mask = logits[inverse], mask[inverse]
    return logits[:, -1], cache, mask


def tree_prefill(
    policy: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    min_shared: int = 1,
    keep_cache: bool = True,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Fill the cache for N prompts with every shared prompt run computed once: the distinct prompts form a
    radix tree (``gigpo_lab.packing.prefix_tree``), which runs as one packed sequence with tree attention
    (``Policy.prefill_packed``); then each row's cache is gathered from its root path (``Policy.gather_cache``),
    left-padded to the longest prompt. Where ``shared_prefill`` shares only the prefix common to all prompts,
    this also shares what a subset has in common (a group's history, a turn's observation).

    Args and returns: as ``shared_prefill``; the mask (N, L) marks each row's real cached tokens, L the
    longest prompt.
    """
    distinct: dict[tuple[int, ...], int] = {}
    inverse = [distinct.setdefault(tuple(row), len(distinct)) for row in unpadded(prompt_ids, prompt_mask)]
    nodes = prefix_tree([list(p) for p in distinct], min_shared)
    packed = packed_tree(nodes, [[] for _ in distinct])
    layout = packed["layout"]
    leaves = [k for k, node in enumerate(nodes) if node.row >= 0]
    by_row = sorted(leaves, key=lambda k: nodes[k].row)  # the leaf of distinct prompt 0, 1, ...
    device = prompt_ids.device
    keep = torch.tensor([layout.spans[k][1] - 1 for k in by_row], device=device)
    logits, cache = policy.prefill_packed(
        packed["ids"].to(device), packed["positions"].to(device), layout.to(device), keep
    )
    # each distinct prompt's root path in the packed cache, left-padded (the padding reads token 0, masked)
    index, mask = left_pad([layout.paths[k].tolist() for k in by_row], 0)
    index, mask = index.to(device), mask.to(device)
    rows = torch.tensor(inverse, device=device)
    if not keep_cache:
        cache = None
    else:
        cache = policy.gather_cache(cache, index)
        if len(by_row) < len(inverse):
            cache = policy.select_cache(cache, rows)
    return logits[rows], cache, mask[rows]
