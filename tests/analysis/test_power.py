"""gigpo_lab.analysis.power: seeds per arm for a paired contrast, against published sample sizes and a
simulation of the paired t-test itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gigpo_lab.analysis.power import detectable_effect, paired_power, planning_alpha, seeds_for


@pytest.mark.parametrize(("dz", "expected"), [(0.2, 199), (0.5, 34), (0.8, 15)])
def test_the_sample_sizes_of_the_paired_t_test_tables(dz, expected):
    # G*Power 3 (Faul et al. 2007), "t tests - means: difference from constant (matched pairs)", a priori,
    # two tails, alpha 0.05, power 0.80: total sample sizes 199, 34 and 15 for effect sizes dz 0.2, 0.5, 0.8
    assert seeds_for(dz, 1.0, 0.05, 0.8) == expected
    # the scale of delta and sd does not matter, only their ratio
    assert seeds_for(dz * 0.1, 0.1, 0.05, 0.8) == expected


def test_the_power_matches_a_simulated_paired_t_test():
    rng = np.random.default_rng(0)
    n, delta, sd, alpha, trials = 12, 0.3, 0.4, 0.01, 20_000
    d = rng.normal(delta, sd, size=(trials, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    rejected = np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)
    simulated = rejected.mean()
    error = np.sqrt(simulated * (1 - simulated) / trials)
    assert abs(paired_power(n, delta, sd, alpha) - simulated) < 4 * error


@settings(max_examples=60, deadline=None)
@given(
    delta=st.floats(0.02, 2.0),
    sd=st.floats(0.05, 2.0),
    m=st.integers(1, 12),
    power=st.sampled_from([0.8, 0.9]),
)
def test_n_is_the_smallest_that_reaches_the_power(delta, sd, m, power):
    alpha = planning_alpha(0.05, m)
    n = seeds_for(delta, sd, alpha, power)
    if n is None:
        return
    assert paired_power(n, delta, sd, alpha) >= power
    if n > 2:
        assert paired_power(n - 1, delta, sd, alpha) < power
    # a larger effect or a smaller family never needs more seeds
    assert seeds_for(delta * 1.5, sd, alpha, power) <= n
    assert seeds_for(delta, sd, planning_alpha(0.05, m + 1), power) >= n


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 400), sd=st.floats(0.01, 2.0), m=st.integers(1, 12), power=st.sampled_from([0.8, 0.9])
)
def test_the_detectable_effect_is_where_the_power_reaches_its_target(n, sd, m, power):
    alpha = planning_alpha(0.05, m)
    mde = detectable_effect(n, sd, alpha, power)
    assert paired_power(n, mde, sd, alpha) == pytest.approx(power, abs=1e-6)
    # the same calculation run the other way: n pairs are the fewest that detect this effect
    assert seeds_for(mde * 1.0001, sd, alpha, power) <= n
    assert seeds_for(mde * 0.999, sd, alpha, power) > n
    # more seeds detect a smaller effect; it scales with the sd
    assert detectable_effect(n + 1, sd, alpha, power) < mde
    assert detectable_effect(n, 2 * sd, alpha, power) == pytest.approx(2 * mde, rel=1e-6)


def test_the_detectable_effect_of_many_seeds_is_the_normal_approximation():
    # for large n the t-test is the z-test: δ = (z_{1-α/2} + z_power) σ_d / √n (Cohen 1988, ch. 2)
    n, sd, alpha = 20_000, 0.3, 0.01
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(0.8)
    assert detectable_effect(n, sd, alpha) == pytest.approx(z * sd / np.sqrt(n), rel=1e-3)


def test_a_target_power_just_above_alpha_needs_an_effect_near_zero():
    mde = detectable_effect(30, 0.3, 0.05, 0.051)
    assert 0 < mde < 0.01 and paired_power(30, mde, 0.3, 0.05) == pytest.approx(0.051, abs=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="delta must be nonzero"):
        seeds_for(0.0, 1.0, 0.05)
    with pytest.raises(ValueError, match="n >= 2"):
        paired_power(1, 0.5, 1.0, 0.05)
    with pytest.raises(ValueError, match="family_size"):
        planning_alpha(0.05, 0)
    assert seeds_for(0.1, 0.0, 0.05) == 2
    with pytest.raises(ValueError, match="sd_diff"):
        detectable_effect(10, 0.0, 0.05)
    with pytest.raises(ValueError, match="alpha < power"):
        detectable_effect(10, 0.2, 0.05, power=0.01)
