"""Node-by-node tree attention equals one dense attention with the tree's mask (an independent reference built
element by element from the rows), for random prompt trees, grouped-query heads and a cached prefix."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.packing.prefix_tree import packed_tree, prefix_tree
from gigpo_lab.packing.tree_attention import node_attention


def reference_mask(nodes, spans, prefix: int) -> torch.Tensor:
    """(T, prefix + T) bool from first principles: a token sees the cached prefix, every token of its node's
    ancestors, and the tokens of its own node up to itself."""
    total = spans[-1][1]
    allowed = torch.zeros(total, prefix + total, dtype=torch.bool)
    allowed[:, :prefix] = True
    for k, (start, end) in enumerate(spans):
        seen = []
        a = nodes[k].parent
        while a >= 0:
            seen.extend(range(spans[a][0], spans[a][1]))
            a = nodes[a].parent
        for q in range(start, end):
            for key in [*seen, *range(start, q + 1)]:
                allowed[q, prefix + key] = True
    return allowed


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=7), min_size=1, max_size=6),
    answers=st.lists(st.integers(0, 3), min_size=6, max_size=6),
    heads=st.sampled_from([(4, 4), (4, 2), (6, 2)]),
    prefix=st.integers(0, 3),
)
def test_node_attention_equals_dense_attention_with_the_tree_mask(prompts, answers, heads, prefix):
    nodes = prefix_tree(prompts)
    packed = packed_tree(nodes, [[7] * answers[i] for i in range(len(prompts))])
    layout = packed["layout"].after_prefix(prefix)
    total = len(packed["ids"])
    g = torch.Generator().manual_seed(len(prompts) * 31 + total)
    q_heads, kv_heads = heads
    query = torch.randn(1, q_heads, total, 8, generator=g)
    key = torch.randn(1, kv_heads, prefix + total, 8, generator=g)
    value = torch.randn(1, kv_heads, prefix + total, 8, generator=g)
    got = node_attention(query, key, value, layout)
    repeat = q_heads // kv_heads
    mask = reference_mask(nodes, packed["layout"].spans, prefix)
    want = F.scaled_dot_product_attention(
        query, key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1), attn_mask=mask
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    if prefix == 0:
        assert torch.equal(layout.dense_mask(), mask), "the layout's own dense mask is the reference's"
