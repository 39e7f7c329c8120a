"""The one contrast engine: its two streams, Holm over the family as listed, and the provisional bounds,
against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.analysis.engine import run_family
from gigpo_lab.analysis.paired import paired_contrast


def _pairs(k: int, n: int = 6, shift: float = 0.3):
    rng = np.random.default_rng(0)
    return [(rng.normal(shift * i, 1, n), rng.normal(0, 1, n)) for i in range(k)]


def test_the_family_stream_draws_in_order_and_the_contrast_stream_afresh():
    pairs = _pairs(3, n=12)  # 2^12 > 500 resamples: Monte-Carlo p, so the stream shows
    fam = run_family(pairs, seed=7, stream="family", resamples=500)
    rng = np.random.default_rng(7)
    by_hand = [paired_contrast(a, b, resamples=500, rng=rng) for a, b in pairs]
    assert [r.result.p_value for r in fam] == [r.p_value for r in by_hand]
    per = run_family(pairs, seed=7, stream="contrast", resamples=500)
    alone = [paired_contrast(a, b, resamples=500, rng=np.random.default_rng(7)) for a, b in pairs]
    assert [r.result.mean_low for r in per] == [r.mean_low for r in alone]
    assert per[0].result.p_value == fam[0].result.p_value and per[1].result.p_value != fam[1].result.p_value


def test_holm_counts_a_contrast_without_pairs_at_one_and_bounds_a_short_one():
    # exact p-values (n = 4: 16 sign vectors): all positive differences -> p = 2/16 = 0.125
    up = (np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4))
    out = run_family([up, None], seed=0, stream="family", resamples=1000)
    assert out[0].result.p_value == pytest.approx(0.125) and out[1] is None
    assert out[0].holm_high == pytest.approx(0.25)  # Holm over 2: the smallest p times 2; None at p = 1
    # planned 6 seeds: the other contrast (4 pairs, short) may still end at 0 or at 1
    # p = 6/16: |±1 ±2 ±3 ±4| >= 6 when the flipped subset sums to <= 2 or >= 8, 3 + 3 of the 16 subsets
    mixed = (np.array([1.0, -2.0, 3.0, 4.0]), np.zeros(4))
    res = run_family([up, mixed], seed=0, stream="family", resamples=1000, planned=6)
    assert res[1].result.p_value == pytest.approx(0.375)
    # for the first: other at 1 -> Holm [0.125, 1] -> 0.25; other at 0 -> the first is ranked second -> 0.125
    assert (res[0].holm_high, res[0].holm_low) == (pytest.approx(0.25), pytest.approx(0.125))
    complete = run_family([up, mixed], seed=0, stream="family", resamples=1000)
    assert complete[0].holm_high == complete[0].holm_low == pytest.approx(0.25)  # plain Holm: 2 x 0.125
    assert complete[1].holm_high == pytest.approx(0.375)  # max(0.25, 1 x 0.375)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(2, 9), st.integers(0, 2**16))
def test_holm_never_lowers_a_p_value_nor_exceeds_one(k, n, seed):
    rng = np.random.default_rng(seed)
    pairs = [(rng.normal(0.5, 1, n), rng.normal(0, 1, n)) for _ in range(k)]
    for r in run_family(pairs, seed=seed, stream="contrast", resamples=200, planned=n + 1):
        assert r.result.p_value <= r.holm_low + 1e-12 <= r.holm_high + 2e-12 <= 1.0 + 3e-12
