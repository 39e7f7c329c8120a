"""Scoring each distinct row once gives the very bits of scoring the whole batch (old/reference log-probs)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.packing.distinct_rows import MIN_SCORED_ROWS, score_unique_rows
from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy import build_tiny_policy

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "\n"]


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(1)
    return build_tiny_policy(VOCAB, d_model=128, n_layers=2, n_heads=4, max_seq_len=64, seed=0).eval()


def distinct_rows(distinct: int, vocab: int, seed: int):
    """``distinct`` rows of left-padded prompts (1..12 tokens) and right-padded responses (1..3 tokens)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(7, vocab, (int(torch.randint(1, 13, (1,), generator=g)),), generator=g).tolist()
        for _ in range(distinct)
    ]
    prompt_ids, prompt_mask = left_pad(prompts, 0)
    response_ids = torch.randint(7, vocab, (distinct, 3), generator=g)
    lengths = torch.randint(1, 4, (distinct,), generator=g)
    response_mask = torch.arange(3) < lengths[:, None]
    response_ids[~response_mask] = 0
    return prompt_ids, prompt_mask, response_ids, response_mask


@settings(max_examples=25, deadline=None)
@given(
    distinct=st.integers(1, 20),
    rows=st.integers(1, 200),
    seed=st.integers(0, 2**31 - 1),
    temperature=st.sampled_from([1.0, 0.7]),
)
def test_unique_scoring_equals_full_batch_bit_for_bit(policy, distinct, rows, seed, temperature):
    columns = distinct_rows(distinct, policy.tokenizer.vocab_size, seed)
    pick = torch.randint(0, distinct, (rows,), generator=torch.Generator().manual_seed(seed + 1))
    batch = tuple(c[pick] for c in columns)
    with torch.no_grad():
        expected = policy.logprobs(*batch, temperature=temperature)  # the oracle: the plain batch
        got = score_unique_rows(policy, *batch, temperature=temperature)
    for got_part, expected_part in zip(got, expected, strict=True):  # log-probs and entropies
        assert got_part.shape == expected_part.shape
        assert torch.equal(got_part, expected_part)


def test_small_and_distinct_batches_are_scored_as_they_are(policy):
    """At most MIN_SCORED_ROWS rows, or mostly distinct rows: the plain call (same bits, trivially)."""
    columns = distinct_rows(30, policy.tokenizer.vocab_size, 0)
    for n in (1, MIN_SCORED_ROWS, 30):
        batch = tuple(c[:n] for c in columns)
        with torch.no_grad():
            got, expected = score_unique_rows(policy, *batch), policy.logprobs(*batch)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
