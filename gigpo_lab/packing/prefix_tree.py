"""Prompts as a radix tree, and the tree as one packed sequence: the layout that runs every shared prompt run
once (the update's ``trainer.shared_prefix`` and the torch engine's ``prefill: tree``).

    rows                     packed (one sequence)               attention of a token of leaf b
    a: [S S S x x | r]       [S S S | x x r | y y y r' | z r'']   S S S and the earlier tokens of b only
    b: [S S S y y y | r']
    c: [S S S z | r'']

Each token keeps the position it has in its own row, and attends to its node's root path
(``gigpo_lab.packing.tree_attention``), so it computes exactly what it computes in its own row, once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gigpo_lab.packing.tree_attention import TreeLayout


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


def packed_tree(nodes: list[_Node], responses: list[list[int]]) -> dict:
    """The tree as one packed sequence: every node's tokens once (parents first), each leaf followed by its
    row's response; a token sees the earlier tokens of its node and all tokens of its ancestors.

    Args:
        nodes: ``prefix_tree``'s nodes. responses: each row's real response tokens.
    Returns:
        ids (T,) int64; positions (T,) int64, a token's index in its own row's plain sequence; layout, the
        ``TreeLayout`` of the attention (each node's span and root path); keep (K,) int64, the columns whose
        logits predict the response tokens, row after row (row r has ``len(responses[r])`` of them); and rows
        (n,) int64, the rows in that order.
    """
    ids: list[int] = []
    positions: list[int] = []
    spans: list[tuple[int, int]] = []
    paths: list[list[int]] = []  # packed indices of each node's root path (ancestors, then its own tokens)
    keep: list[int] = []
    rows: list[int] = []
    for node in nodes:
        before = paths[node.parent] if node.parent >= 0 else []
        tokens = node.tokens + (responses[node.row] if node.row >= 0 else [])
        if node.row >= 0:
            first = len(ids) + len(node.tokens) - 1  # the leaf's last prompt token
            keep.extend(range(first, first + len(responses[node.row])))
            rows.append(node.row)
        start = len(ids)
        ids.extend(tokens)
        positions.extend(range(len(before), len(before) + len(tokens)))
        spans.append((start, len(ids)))
        paths.append(before + list(range(start, len(ids))))
    layout = TreeLayout(
        spans,
        [len(paths[n.parent]) if n.parent >= 0 else 0 for n in nodes],
        [torch.tensor(p, dtype=torch.long) for p in paths],
        [n.parent for n in nodes],
    )
    return {
        "ids": torch.tensor(ids, dtype=torch.long),
        "positions": torch.tensor(positions, dtype=torch.long),
        "layout": layout,
        "keep": torch.tensor(keep, dtype=torch.long),
        "rows": torch.tensor(rows, dtype=torch.long),
    }
