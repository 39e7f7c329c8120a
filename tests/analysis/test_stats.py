"""The bootstrap statistics of ``gigpo-lab compare`` against values worked out by hand and against their
definitions (Agarwal et al. 2021; rliable's ``aggregate_iqm``, ``probability_of_improvement``,
``StratifiedBootstrap``): IQM, probability of improvement, CI coverage, strata, performance profiles."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gigpo_lab.analysis import stats

RATES = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=12)


def test_iqm_of_hand_made_arrays():
    # n = 8: int(0.25 · 8) = 2 cut at each end -> mean(3, 4, 5, 6)
    assert stats.iqm(np.array([8.0, 1, 7, 2, 6, 3, 5, 4])) == 4.5
    # n = 10: int(2.5) = 2 cut at each end -> mean(0.1, 0.2, 0.5, 0.6, 0.7, 0.9) = 3.0 / 6
    ten = np.array([1.0, 0.0, 0.9, 0.2, 0.0, 1.0, 0.5, 0.1, 0.7, 0.6])
    assert stats.iqm(ten) == pytest.approx(0.5, abs=1e-12)
    # a collapsed seed (0) and a lucky one (1) among middling ones do not move the IQM
    assert stats.iqm(np.array([0.0, 0.4, 0.4, 0.5, 0.5, 0.6, 0.6, 1.0])) == pytest.approx(0.5)
    estimate = stats.iqm_estimate([ten])
    assert estimate.value == pytest.approx(0.5) and 0.0 <= estimate.low <= 0.5 <= estimate.high <= 1.0


def test_two_runs_give_the_min_max_interval():
    """With 2 runs the resampled means are a, (a+b)/2, b with probability ¼, ½, ¼: the 95% CI is [a, b]."""
    e = stats.mean_estimate([np.array([0.25, 0.75])])
    assert (e.value, e.low, e.high) == (0.5, 0.25, 0.75)


def test_probability_of_improvement_on_known_samples():
    separated_x, separated_y = [np.array([0.7, 0.8, 0.9, 1.0])], [np.array([0.0, 0.1, 0.2, 0.3])]
    up = stats.probability_of_improvement(separated_x, separated_y)
    assert (up.value, up.low, up.high) == (1.0, 1.0, 1.0)
    assert stats.probability_of_improvement(separated_y, separated_x).value == 0.0
    same = np.array([0.1, 0.5, 0.5, 0.9])
    identical = stats.probability_of_improvement([same], [same.copy()])
    assert identical.value == 0.5 and identical.low < 0.5 < identical.high
    # the worked example of the docstring: (1 + 0 + 1 + ½) / 4
    assert stats.probability_of_improvement([np.array([1.0, 2.0])], [np.array([0.0, 2.0])]).value == 0.625
    # two tasks: separated (1.0) and identical (0.5) average to 0.75
    both = stats.probability_of_improvement([separated_x[0], same], [separated_y[0], same])
    assert both.value == 0.75


def test_the_ci_covers_the_true_mean_about_95_percent_of_the_time():
    """200 fixed-seed repeats of 30 draws from Beta(2, 5) (mean 2/7): the percentile CI covers 2/7 in ~95%."""
    rng = np.random.default_rng(12345)
    true_mean = 2.0 / 7.0
    covered = 0
    for _ in range(200):
        e = stats.mean_estimate([rng.beta(2.0, 5.0, size=30)])
        covered += e.low <= true_mean <= e.high
    assert 0.90 <= covered / 200 <= 0.99


def test_strata_are_resampled_separately():
    """Every stratified resample of {0, 0, 0} ∪ {1, 1, 1} has mean ½; a pooled bootstrap would not."""
    e = stats.mean_estimate([np.zeros(3), np.ones(3)])
    assert (e.value, e.low, e.high) == (0.5, 0.5, 0.5)
    pooled = stats.mean_estimate([np.array([0.0, 0, 0, 1, 1, 1])])
    assert pooled.low < 0.5 < pooled.high
    # a stratum of one run is held fixed; with no stratum of two there is no interval
    held = stats.mean_estimate([np.array([0.0, 1.0]), np.array([0.5])])
    assert held.value == 0.5 and (held.low, held.high) == (pytest.approx(1 / 6), pytest.approx(5 / 6))
    single = stats.iqm_estimate([np.array([0.3])])
    assert single.value == 0.3 and not single.has_ci


def test_performance_profile_by_hand():
    share, low, high = stats.performance_profile(
        [np.array([0.0, 0.2, 0.9, 1.0, 1.0]), np.array([0.5, 0.6])], [0.0, 0.5, 0.9, 1.0]
    )
    # task 1: 5/5, 3/5, 3/5, 2/5 ≥ τ; task 2: 2/2, 2/2, 0/2, 0/2; averaged over the two tasks
    assert share.tolist() == pytest.approx([1.0, 0.8, 0.3, 0.2])
    assert (low <= share).all() and (share <= high).all() and low[0] == high[0] == 1.0


@settings(max_examples=30, deadline=None)
@given(RATES, RATES)
@example([0.8007077814013737] * 3, [0.0, 0.0])  # IQM one ulp below its values (see below)
def test_rate_intervals_stay_in_the_unit_interval(x, y):
    x, y = np.array(x), np.array(y)
    for e in (
        stats.iqm_estimate([x]),
        stats.mean_estimate([x, y]),
        stats.probability_of_improvement([x], [y]),
    ):
        assert 0.0 <= e.low <= e.high <= 1.0
    # a float mean can leave its values' range by rounding: IQM([a, a, a]) is 3a / 3, which for
    # a = 0.8007077814013737 is one ulp below a (a hypothesis find); beyond that, the range holds
    ulp = np.spacing(max(abs(min(x)), abs(max(x)), 1e-300))
    assert min(x) - 2 * ulp <= stats.iqm(x) <= max(x) + 2 * ulp
    assert stats.mean_estimate([x]).value == pytest.approx(statistics.fmean(x))


@settings(max_examples=30, deadline=None)
@given(RATES, RATES)
def test_improvement_is_antisymmetric(x, y):
    forward = stats.probability_of_improvement([np.array(x)], [np.array(y)]).value
    backward = stats.probability_of_improvement([np.array(y)], [np.array(x)]).value
    assert forward + backward == pytest.approx(1.0)


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement([np.ones(2)], [np.ones(2), np.ones(2)])


def _binomial_tail(k_low: int, k_high: int, n: int, p: float) -> float:
    """P(k_low <= X <= k_high) for X ~ Binomial(n, p), summed term by term."""
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(k_low, k_high + 1))


def _bisect(f, lo=0.0, hi=1.0) -> float:
    """The root of an increasing f on [lo, hi], to 1e-12."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=40).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_clopper_pearson_inverts_the_binomial_tails(case):
    """The oracle is the definition: low solves P(X >= k | low) = 0.025, high solves P(X <= k | high) = 0.025,
    found by bisection on the binomial sums (no Beta quantile involved)."""
    k, n = case
    low, high = stats.clopper_pearson(k, n)
    want_low = 0.0 if k == 0 else _bisect(lambda p: _binomial_tail(k, n, n, p) - 0.025)
    want_high = 1.0 if k == n else _bisect(lambda p: 0.025 - _binomial_tail(0, k, n, p))
    assert (low, high) == pytest.approx((want_low, want_high), abs=1e-7)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_clopper_pearson_known_values_and_bad_counts():
    """10/10 gives [0.6915, 1] and 9/10 [0.5550, 0.9975] (the standard exact-interval table values)."""
    assert stats.clopper_pearson(10, 10) == pytest.approx((0.69150, 1.0), abs=1e-4)
    assert stats.clopper_pearson(9, 10) == pytest.approx((0.55498, 0.99747), abs=1e-4)
    with pytest.raises(ValueError, match="0 <= solved <= n"):
        stats.clopper_pearson(11, 10)


def test_the_primary_metrics_are_fractions_like_the_rates():
    from gigpo_lab.analysis.report import is_rate

    assert is_rate("eval/final") and is_rate("eval/auc") and is_rate("eval/success_rate")
    assert not is_rate("eval/return") and not is_rate("eval/length")
