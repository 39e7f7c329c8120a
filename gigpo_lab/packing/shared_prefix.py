"""The update's forward with every shared prompt run computed once: the same log-probs and gradients, less compute.

An LLM row's prompt is most of its tokens (a ~200-token prompt for a ~10-token answer), and the rows of a
micro-batch share much of it: every HF prompt opens with the same system prompt, the G episodes of a group see
the same first observation, and rows of a later turn repeat the history they share. The rows' prompts form a
radix tree, packed into one sequence without padding, every node's tokens once and each leaf followed by its
row's response (``gigpo_lab.packing.prefix_tree``). It runs through the policy in one forward, with each
token's position in its own row and tree attention: one attention per node over the keys of its root path
(``gigpo_lab.packing.tree_attention``), so no work goes to the pairs a dense mask would mask out.

So every token computes exactly what it computes in its own row, once: the loss and the gradients are those of
``Policy.logprobs`` on the plain rows up to float rounding (tests/packing/test_shared_prefix.py). This is the
tree attention of speculative decoding (SpecInfer, Miao et al. 2023, arXiv 2305.09781) used for scoring, and
the prefix reuse of SGLang's RadixAttention (Zheng et al. 2023, arXiv 2312.07104) with gradients. Sorting the
rows by prompt before cutting micro-batches (``prefix_sorted_chunks``) keeps rows that share runs together.
"""

from __future__ import annotations

from typing import Any

import torch

from gigpo_lab.packing.logprobs import response_logprobs
from gigpo_lab.packing.padding import unpadded
from gigpo_lab.packing.prefill import common_prefix_length
from gigpo_lab.packing.prefix_tree import packed_tree, prefix_tree


def shared_prefix_logprobs(
    policy: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    allowed: torch.Tensor | None = None,
    temperature: float = 1.0,
    min_shared: int = 1,
    past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``policy.logprobs(...)`` of n rows, every shared prompt run computed once, in one forward (differentiable).

    The prompts form a radix tree (``prefix_tree``), packed into one sequence without padding
    (``packed_tree``) and run through ``policy.forward_packed`` with the tree's attention pattern and each
    token's plain position, so every token computes what it computes in its own row, once.

    Args:
        policy: anything with ``Policy.forward_packed`` and ``logprobs``.
        prompt_ids: (n, P) int64, left-padded; prompt_mask: (n, P) bool.
        response_ids: (n, R) int64, right-padded; response_mask: (n, R) bool (a prefix of each row).
        allowed: (n, V) bool or None: each row's allowed first response tokens (``Policy.logprobs``).
        min_shared: the shortest shared run that becomes a node; with no node at all (and no ``past``) it is
            plain ``policy.logprobs``.
        past: the keys and values of the first L prompt tokens, which every row starts with, already run
            (``policy.prefix_kv``; per layer (1, H_kv, L, D)): only the rest of each prompt is packed.
    Returns:
        logp (n, R) and entropy (n, R) float, 0 where masked.
    """
    skip = past[0][0].shape[2] if past else 0
    prompts = [row[skip:] for row in unpadded(prompt_ids, prompt_mask)]
    nodes = prefix_tree(prompts, min_shared)
    if not past and all(node.row >= 0 for node in nodes):
        return policy.logprobs(
            prompt_ids, prompt_mask, response_ids, response_mask, allowed, temperature=temperature
        )
    lengths = response_mask.sum(1)
    responses = [ids[:n].tolist() for ids, n in zip(response_ids, lengths.tolist(), strict=True)]
    packed = {k: v.to(prompt_ids.device) for k, v in packed_tree(nodes, responses).items()}
    layout = packed["layout"].after_prefix(skip).to(prompt_ids.device)
    logits = policy.forward_packed(
        packed["ids"], packed["positions"] + skip, layout, packed["keep"], **({"past": past} if past else {})
    )
    # spread the kept logits (K, V) to (n, R, V) in row order; padding columns get row 0's first logits
    rows = packed["rows"]
    width = response_ids.shape[1]
    starts = torch.cumsum(lengths[rows], 0) - lengths[rows]
    column = torch.arange(width, device=prompt_ids.device)
    index = starts[:, None] + column[None, :]
    index = torch.where(column[None, :] < lengths[rows][:, None], index, torch.zeros_like(index))
    row_logp, row_entropy = response_logprobs(
        logits[index],
        response_ids[rows],
        response_mask[rows],
        temperature,
        None if allowed is None else allowed[rows],
    )
    order = rows.argsort()
    return row_logp[order], row_entropy[order]


#: The shortest prompt opening shared by every row of a minibatch that gets a forward of its own (below it,
#: each micro-batch's tree runs it).
MIN_COMMON_PREFIX = 16


def common_prompt_prefix(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, min_length: int = MIN_COMMON_PREFIX
) -> torch.Tensor | None:
    """The real tokens (L,) int64 that every row's prompt starts with, each row keeping at least one token of
    its own; None when L < ``min_length`` or there is one row. Micro-batches run it once per minibatch
    (``prefix_kv``) instead of once each.

    Shapes: prompt_ids (N, P) left-padded, prompt_mask (N, P) bool.
    """
    if prompt_ids.shape[0] < 2:
        return None
    lengths = prompt_mask.sum(1)
    shared = common_prefix_length(prompt_ids, lengths)
    if shared < min_length:
        return None
    start = prompt_ids.shape[1] - int(lengths[0])
    return prompt_ids[0, start : start + shared]


def prefix_sorted_chunks(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    size: int,
    max_tokens: int = 0,
    response_lengths: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Row indices (int64) in chunks, the rows in the lexicographic order of their prompts' real tokens, so
    that the rows of a chunk share long prefixes. A chunk closes at ``size`` rows (<= 0: no row limit) and,
    with ``max_tokens`` > 0, before its packed tree would exceed ``max_tokens`` tokens (a row longer than that
    is a chunk of its own): then the chunks are bounded by what drives their memory, and rows that share more
    fit more to a chunk (verl's ``use_dynamic_bsz`` token budget, counted on the tree). With neither limit, one
    chunk of all rows.

    A chunk's packed tokens are counted as in a trie of its sorted prompts, each prompt adding the tokens after
    its longest common prefix with the previous one, plus the responses' ``response_lengths`` (N,) (0 if None).

    The chunks come largest first (by those tokens): the later, smaller chunks' tensors then fit in the blocks
    the allocator kept from the first, instead of growing the heap (in one SmolLM2 iteration,
    experiments/bench/bench_llm_iteration.py, the update's peak fell from 3.04 to 2.64 GiB; the gradients only
    change by the order of the accumulation's float additions).

    Shapes: prompt_ids (N, P) left-padded, prompt_mask (N, P) bool.
    """
    n = prompt_ids.shape[0]
    if n == 0:
        return []
    texts = unpadded(prompt_ids, prompt_mask)
    order = sorted(range(n), key=texts.__getitem__)
    answers = [0] * n if response_lengths is None else response_lengths.tolist()
    chunks: list[list[int]] = []
    costs: list[int] = []
    previous: list[int] = []
    for row in order:
        text = texts[row]
        shared = 0
        while shared < min(len(text), len(previous)) and text[shared] == previous[shared]:
            shared += 1
        grow = len(text) - shared + answers[row]
        full = 0 < size <= len(chunks[-1]) if chunks else True
        over = max_tokens > 0 and chunks and costs[-1] + grow > max_tokens
        if not chunks or full or over:
            chunks.append([])
            costs.append(0)
            grow = len(text) + answers[row]  # a new chunk shares nothing yet
        chunks[-1].append(row)
        costs[-1] += grow
        previous = text
    device = prompt_ids.device
    ranked = sorted(range(len(chunks)), key=lambda k: -costs[k])  # stable: ties keep prompt order
    return [torch.tensor(chunks[k], dtype=torch.long, device=device) for k in ranked]
