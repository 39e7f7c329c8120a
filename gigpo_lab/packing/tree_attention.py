"""Attention over a packed prefix tree, node by node: each token attends to exactly the keys it may see, and no
time goes to the masked-out pairs of a dense mask.

A packed tree (``gigpo_lab.packing.shared_prefix.packed_tree``) lays out the nodes one after the other; a
token of node k sees the tokens of k's ancestors and the earlier tokens of k. A dense (T, T) mask makes
attention cost T² per layer although most pairs are masked (siblings never see each other): with four rows
that share a 100-token system prompt and have 150 tokens each of their own, about a quarter of the pairs are
allowed. Here every node runs its own attention over the keys of its root path::

    packed   [S S S | a a a | b b]        node a:  queries a a a, keys S S S a a a   (causal within a)
    nodes    root S, leaves a and b       node b:  queries b b,   keys S S S b b     (causal within b)

so the work is the sum over nodes of (node tokens x path tokens). Every query sees the same keys with the same
scores as in its own plain row, so the outputs are those of the dense mask up to float rounding.

The function is registered with ``transformers``' ``AttentionInterface`` as ``"gigpo_tree"`` and used only while
``tree_attention(model)`` is active; a forward without a ``tree_layout`` keyword falls back to SDPA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ATTENTION_NAME = "gigpo_tree"


@dataclass(frozen=True)
class TreeLayout:
    """Where each node of a packed tree sits and which keys it reads.

    Attributes:
        spans: per node, (start, end) of its tokens in the packed sequence (nodes are contiguous and in order,
            parents first, so the spans tile [0, T)).
        ancestors: per node, how many tokens its ancestors have (its path's length before its own tokens).
        paths: per node, (ancestors + end - start,) int64: the packed indices of its root path's tokens, the
            ancestors' in root-to-parent order, then its own.
        parents: per node, the node it continues (-1: none), parents first.
    """

    spans: list[tuple[int, int]]
    ancestors: list[int]
    paths: list[torch.Tensor]
    parents: list[int]

    @property
    def length(self) -> int:
        """T, the packed sequence's length."""
        return self.spans[-1][1] if self.spans else 0

    def to(self, device: torch.device | str) -> TreeLayout:
        return TreeLayout(self.spans, self.ancestors, [p.to(device) for p in self.paths], self.parents)

    def after_prefix(self, length: int) -> TreeLayout:
        """The layout of the same tree placed after ``length`` cached tokens that every node sees (a shared
        prefix run once, whose keys come first): the spans stay, the paths start with the prefix."""
        if length == 0:
            return self
        head = torch.arange(length)
        return TreeLayout(
            self.spans,
            [before + length for before in self.ancestors],
            [torch.cat([head.to(p.device), p + length]) for p in self.paths],
            self.parents,
        )

    def dense_mask(self, prefix: int = 0) -> torch.Tensor:
        """The same pattern as a (T, prefix + T) bool mask, query x key (for dense attention and for tests);
        ``prefix``: the length this layout was placed after (``after_prefix``), whose keys come first.

        Built from the nodes' ancestry, without a loop over tokens: token i sees token j when j's node is i's
        node or one of its ancestors, and j <= i (nodes are packed parents first, so within a node that is
        causal and every ancestor's tokens come earlier)."""
        n = len(self.spans)
        lines: list[list[int]] = []  # each node and its ancestors
        for node, parent in enumerate(self.parents):
            lines.append((lines[parent] if parent >= 0 else []) + [node])
        ancestry = torch.zeros(n, n, dtype=torch.bool)  # ancestry[a, b]: b is a or an ancestor of a
        ancestry[
            torch.repeat_interleave(
                torch.arange(n), torch.tensor([len(line) for line in lines], dtype=torch.long)
            ),
            torch.tensor([b for line in lines for b in line], dtype=torch.long),
        ] = True
        sizes = torch.tensor([end - start for start, end in self.spans], dtype=torch.long)
        node_of = torch.repeat_interleave(torch.arange(n), sizes)
        allowed = ancestry[node_of][:, node_of].tril_()
        if prefix:
            allowed = torch.cat([allowed.new_ones(self.length, prefix), allowed], dim=1)
        return allowed


def node_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: TreeLayout,
    scaling: float | None = None,
) -> torch.Tensor:
    """Attention of a packed tree, one SDPA call per node.

    Args:
        query: (1, H, T, D); key, value: (1, H_kv, S, D) with H a multiple of H_kv (grouped-query attention),
            S = T plus any cached prefix before the packed tokens (``TreeLayout.after_prefix``).
        layout: the tree's ``TreeLayout`` (T tokens).
        scaling: the score scale (None: 1/sqrt(D)).
    Returns:
        (1, H, T, D): each query's attention over the keys of its node's root path, causal within the node.
    """
    grouped = query.shape[1] != key.shape[1]  # SDPA shares each key head among its query heads, no copies
    outputs = []
    for (start, end), before, path in zip(layout.spans, layout.ancestors, layout.paths, strict=True):
        rows = torch.arange(end - start, device=query.device)
        cols = torch.arange(len(path), device=query.device)
        allowed = cols[None, :] <= before + rows[:, None]
        keys = key.index_select(2, path)
        values = value.index_select(2, path)
        outputs.append(
            F.scaled_dot_product_attention(
                query[:, :, start:end], keys, values, attn_mask=allowed, scale=scaling, enable_gqa=grouped
            )
        )
    return torch.cat(outputs, dim=2)


def tree_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    tree_layout: TreeLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A ``transformers`` attention function: ``node_attention`` when the forward carries ``tree_layout``,
    SDPA otherwise. Returns the output as (B, T, H, D), as ``transformers`` expects."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if tree_layout is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if dropout:
        raise ValueError("tree attention has no attention dropout; set the model's attention_dropout to 0")
    out = node_attention(query, key, value, tree_layout, scaling)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, tree_attention_forward)


@contextlib.contextmanager
def tree_attention(config) -> Iterator[None]:
    """Inside the block, the model of ``config`` (a ``PretrainedConfig``) runs ``tree_attention_forward``."""
    _register()
    # private: the attention function a transformers model calls is read from its config's
    # _attn_implementation at every forward, and the switch here must be a config's (this package knows no
    # model class) and cheap enough to flip around each packed forward; the public
    # PreTrainedModel.set_attn_implementation is a model's, and validates and walks every sub-config per call.
    # transformers is pinned to the tested major (pyproject.toml); tests/test_private_apis.py checks the switch.
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = before
