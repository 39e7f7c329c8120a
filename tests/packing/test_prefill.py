"""shared_prefill and tree_prefill: the same logits and continuation as a plain left-padded prefill."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.packing.padding import left_pad
from gigpo_lab.packing.prefill import common_prefix_length, shared_prefill, tree_prefill
from gigpo_lab.policy import build_hf_policy, build_tiny_policy

POLICY = build_tiny_policy([str(i) for i in range(30)], d_model=32, max_seq_len=64, seed=2)


def test_common_prefix_leaves_every_row_a_token():
    ids, mask = left_pad([[7, 8, 9, 10], [7, 8, 9], [7, 8, 9, 11, 12]], 0)
    assert common_prefix_length(ids, mask.sum(1)) == 2
    ids, mask = left_pad([[7, 8], [9, 8]], 0)
    assert common_prefix_length(ids, mask.sum(1)) == 0


@settings(max_examples=25, deadline=None)
@given(
    prefix=st.lists(st.integers(6, 35), max_size=8),
    suffixes=st.lists(st.lists(st.integers(6, 35), min_size=1, max_size=6), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_shared_prefill_matches_the_plain_prefill(prefix, suffixes, picks):
    prompts = [prefix + suffixes[p % len(suffixes)] for p in picks]
    ids, mask = left_pad(prompts, POLICY.tokenizer.pad_id)
    with torch.no_grad():
        logits, cache, shared_mask = shared_prefill(POLICY, ids, mask)
        plain, plain_cache = POLICY.forward_logits(ids, mask, None, logits_to_keep=1)
        torch.testing.assert_close(logits, plain[:, -1], atol=1e-5, rtol=0)
        assert torch.equal(shared_mask.sum(1), mask.sum(1))
        # one more token through each cache gives the same logits
        token = torch.full((len(prompts), 1), 9)
        step = torch.ones(len(prompts), 1, dtype=torch.bool)
        after, _ = POLICY.forward_logits(token, torch.cat([shared_mask, step], 1), cache)
        after_plain, _ = POLICY.forward_logits(token, torch.cat([mask, step], 1), plain_cache)
    torch.testing.assert_close(after, after_plain, atol=1e-5, rtol=0)


@settings(max_examples=15, deadline=None)
@given(
    prefix=st.lists(st.integers(6, 35), max_size=8),
    suffixes=st.lists(st.lists(st.integers(6, 35), min_size=1, max_size=6), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 3), min_size=1, max_size=12),
)
def test_a_prefill_without_cache_gives_the_same_logits_and_mask(prefix, suffixes, picks):
    """keep_cache=False (a one-token response): the very logits and mask, no cache copied out."""
    ids, mask = left_pad([prefix + suffixes[p % len(suffixes)] for p in picks], POLICY.tokenizer.pad_id)
    with torch.no_grad():
        logits, _, shared_mask = shared_prefill(POLICY, ids, mask)
        bare_logits, cache, bare_mask = shared_prefill(POLICY, ids, mask, keep_cache=False)
    assert cache is None
    assert torch.equal(bare_logits, logits) and torch.equal(bare_mask, shared_mask)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return build_hf_policy(str(build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))))


#: The tiny policy's packed prefill (a dense tree mask), on ids 6..60.
TINY = build_tiny_policy([str(i) for i in range(60)], d_model=32, max_seq_len=64, seed=3)


@pytest.fixture(scope="module", params=["hf", "tiny"])
def packed(request):
    """A policy with a packed prefill: the HF one (tree attention) or the tiny one."""
    return request.getfixturevalue("hf") if request.param == "hf" else TINY


@settings(max_examples=20, deadline=None)
@given(
    stem=st.lists(st.integers(6, 60), max_size=6),
    branches=st.lists(
        st.tuples(
            st.lists(st.integers(6, 60), max_size=4), st.lists(st.integers(6, 60), min_size=1, max_size=5)
        ),
        min_size=1,
        max_size=4,
    ),
    picks=st.lists(st.integers(0, 7), min_size=1, max_size=9),
)
def test_tree_prefill_matches_the_plain_prefill(packed, stem, branches, picks):
    """Prompts that share a stem, some of them a branch too, repeated: tree_prefill's logits, mask and cache
    (one more token through it) equal a plain left-padded prefill's within 1e-5."""
    prompts = [
        stem + branches[p % len(branches)][0] + branches[p % len(branches)][1][: 1 + p % 5] for p in picks
    ]
    ids, mask = left_pad(prompts, packed.tokenizer.pad_id)
    with torch.no_grad():
        logits, cache, tree_mask = tree_prefill(packed, ids, mask)
        plain, plain_cache = packed.forward_logits(ids, mask, None, logits_to_keep=1)
        torch.testing.assert_close(logits, plain[:, -1], atol=1e-5, rtol=0)
        assert torch.equal(tree_mask.sum(1), mask.sum(1))
        assert (tree_mask[:, :-1] <= tree_mask[:, 1:]).all(), "left-padded"
        token = torch.full((len(prompts), 1), 9)
        step = torch.ones(len(prompts), 1, dtype=torch.bool)
        after, _ = packed.forward_logits(token, torch.cat([tree_mask, step], 1), cache)
        after_plain, _ = packed.forward_logits(token, torch.cat([mask, step], 1), plain_cache)
    torch.testing.assert_close(after, after_plain, atol=1e-5, rtol=0)


def test_tree_prefill_without_cache_gives_the_same_logits(packed):
    ids, mask = left_pad([[7, 8, 9], [7, 8, 10, 11], [7, 8, 9]], packed.tokenizer.pad_id)
    with torch.no_grad():
        logits, cache, _ = tree_prefill(packed, ids, mask)
        bare_logits, no_cache, _ = tree_prefill(packed, ids, mask, keep_cache=False)
    assert no_cache is None and torch.equal(bare_logits, logits)
