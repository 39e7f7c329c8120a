"""The update's forward with every shared prompt run computed once: the same log-probs and gradients, less compute.

An LLM row's prompt is most of its tokens (a ~200-token prompt for a ~10-token answer), and the rows of a
micro-batch share much of it: every HF prompt opens with the same system prompt, the G episodes of a group see
the same first observation, and rows of a later turn repeat the history they share. The rows' prompts form a
radix tree (``prefix_tree``); the tree is packed into one sequence without padding, every node's tokens once
and each leaf followed by its row's response (``packed_tree``), and runs through the policy in one forward
with a tree-shaped attention mask and each token's position in its own row::

    rows                     packed (one sequence)               attention of a token of leaf b
    a: [S S S x x | r]       [S S S | x x r | y y y r' | z r'']   S S S and the earlier tokens of b only
    b: [S S S y y y | r']
    c: [S S S z | r'']

So every token computes exactly what it computes in its own row, once: the loss and the gradients are those of
``Policy.logprobs`` on the plain rows up to float rounding (tests/training/test_shared_prefix.py). This is the
tree attention of speculative decoding (SpecInfer, Miao et al. 2023, arXiv 2305.09781) used for scoring, and
the prefix reuse of SGLang's RadixAttention (Zheng et al. 2023, arXiv 2312.07104) with gradients. Sorting the
rows by prompt before cutting micro-batches (``prefix_sorted_chunks``) keeps rows that share runs together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gigpo_lab.policy.base import response_logprobs


@dataclass
class _Node:
    """A run of prompt tokens ``tokens`` shared by the rows under it (internal node), or one row's own rest
    of its prompt (leaf, ``row`` >= 0); ``parent`` is the node it continues (-1: none)."""

    tokens: list[int]
    parent: int
    row: int = -1


def prefix_tree(prompts: list[list[int]], min_shared: int = 1) -> list[_Node]:
    """The rows' prompts as a radix tree: each shared run of at least ``min_shared`` tokens is one internal node,
    every row ends in a leaf holding at least one prompt token of its own (whose logit predicts the response's
    first token). Shorter shared runs are repeated in the children instead of becoming nodes. Nodes come in
    creation order, a parent before its children.
    """
    nodes: list[_Node] = []

    def build(rows: list[int], start: int, parent: int) -> None:
        if len(rows) == 1:
            nodes.append(_Node(prompts[rows[0]][start:], parent, rows[0]))
            return
        room = min(len(prompts[r]) for r in rows) - start - 1  # each row keeps a token for its leaf
        shared = 0
        first = prompts[rows[0]]
        while shared < room and all(prompts[r][start + shared] == first[start + shared] for r in rows):
            shared += 1
        if shared >= min_shared:
            nodes.append(_Node(first[start : start + shared], parent))
            parent, start, shared = len(nodes) - 1, start + shared, 0
        parts: dict[int, list[int]] = {}
        if shared < room:  # the rows differ at start + shared: split them there
            for r in rows:
                parts.setdefault(prompts[r][start + shared], []).append(r)
        if len(parts) < 2:  # every row is as short as the run allows: each ends here
            for r in rows:
                nodes.append(_Node(prompts[r][start:], parent, r))
            return
        for part in parts.values():
            build(part, start, parent)

    build(list(range(len(prompts))), 0, -1)
    return nodes


def packed_tree(nodes: list[_Node], responses: list[list[int]]) -> dict[str, torch.Tensor]:
    """The tree as one packed sequence: every node's tokens once (parents first), each leaf followed by its
    row's response; a token sees the earlier tokens of its node and all tokens of its ancestors.

    Args:
        nodes: ``prefix_tree``'s nodes. responses: each row's real response tokens.
    Returns:
        ids (T,) int64; positions (T,) int64, a token's index in its own row's plain sequence; allowed (T, T)
        bool, the attention pattern; keep (K,) int64, the columns whose logits predict the response tokens,
        row after row (row r has ``len(responses[r])`` of them); and rows (n,) int64, the rows in that order.
    """
    ids: list[int] = []
    positions: list[int] = []
    node_of: list[int] = []
    offset = [0] * len(nodes)  # tokens before the node on its root path
    keep: list[int] = []
    rows: list[int] = []
    for k, node in enumerate(nodes):
        parent = node.parent
        offset[k] = offset[parent] + len(nodes[parent].tokens) if parent >= 0 else 0
        tokens = node.tokens + (responses[node.row] if node.row >= 0 else [])
        if node.row >= 0:
            first = len(ids) + len(node.tokens) - 1  # the leaf's last prompt token
            keep.extend(range(first, first + len(responses[node.row])))
            rows.append(node.row)
        ids.extend(tokens)
        positions.extend(range(offset[k], offset[k] + len(tokens)))
        node_of.extend([k] * len(tokens))
    ancestor = torch.eye(len(nodes), dtype=torch.bool)  # ancestor[a, b]: b is a or an ancestor of a
    for k, node in enumerate(nodes):
        if node.parent >= 0:
            ancestor[k] |= ancestor[node.parent]
    owner = torch.tensor(node_of, dtype=torch.long)
    order = torch.arange(len(ids))
    allowed = ancestor[owner][:, owner] & (order[None, :] <= order[:, None])
    return {
        "ids": torch.tensor(ids, dtype=torch.long),
        "positions": torch.tensor(positions, dtype=torch.long),
        "allowed": allowed,
        "keep": torch.tensor(keep, dtype=torch.long),
        "rows": torch.tensor(rows, dtype=torch.long),
    }


def shared_prefix_logprobs(
    policy: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    min_shared: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``policy.logprobs(...)`` of n rows, every shared prompt run computed once, in one forward (differentiable).

    The prompts form a radix tree (``prefix_tree``), packed into one sequence without padding
    (``packed_tree``) and run through ``policy.forward_packed`` with the tree's attention pattern and each
    token's plain position, so every token computes what it computes in its own row, once.

    Args:
        policy: anything with ``Policy.forward_packed`` and ``logprobs``.
        prompt_ids: (n, P) int64, left-padded; prompt_mask: (n, P) bool.
        response_ids: (n, R) int64, right-padded; response_mask: (n, R) bool (a prefix of each row).
        min_shared: the shortest shared run that becomes a node; with no node at all it is plain
            ``policy.logprobs``.
    Returns:
        logp (n, R) and entropy (n, R) float, 0 where masked.
    """
    prompts = [ids[mask].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
    nodes = prefix_tree(prompts, min_shared)
    if all(node.row >= 0 for node in nodes):
        return policy.logprobs(prompt_ids, prompt_mask, response_ids, response_mask, temperature=temperature)
    lengths = response_mask.sum(1)
    responses = [ids[:n].tolist() for ids, n in zip(response_ids, lengths.tolist(), strict=True)]
    packed = {k: v.to(prompt_ids.device) for k, v in packed_tree(nodes, responses).items()}
    logits = policy.forward_packed(packed["ids"], packed["positions"], packed["allowed"], packed["keep"])
    # spread the kept logits (K, V) to (n, R, V) in row order; padding columns get row 0's first logits
    rows = packed["rows"]
    width = response_ids.shape[1]
    starts = torch.cumsum(lengths[rows], 0) - lengths[rows]
    column = torch.arange(width, device=prompt_ids.device)
    index = starts[:, None] + column[None, :]
    index = torch.where(column[None, :] < lengths[rows][:, None], index, torch.zeros_like(index))
    row_logp, row_entropy = response_logprobs(
        logits[index], response_ids[rows], response_mask[rows], temperature
    )
    order = rows.argsort()
    return row_logp[order], row_entropy[order]


def prefix_sorted_chunks(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, size: int
) -> list[torch.Tensor]:
    """Row indices (int64) in chunks of ``size`` rows, the rows in the lexicographic order of their prompts'
    real tokens, so that the rows of a chunk share long prefixes. ``size`` <= 0: one chunk of all rows.

    Shapes: prompt_ids (N, P) left-padded, prompt_mask (N, P) bool.
    """
    n = prompt_ids.shape[0]
    if n == 0:
        return []
    texts = [ids[mask].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
    order = torch.tensor(sorted(range(n), key=texts.__getitem__), dtype=torch.long, device=prompt_ids.device)
    return list(order.split(n if size <= 0 else size))
