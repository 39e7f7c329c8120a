"""gigpo_lab.analysis.power: seeds per arm for a paired contrast, against published sample sizes and a
simulation of the paired t-test itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gigpo_lab.analysis.power import paired_power, planning_alpha, seeds_for


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


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="delta must be nonzero"):
        seeds_for(0.0, 1.0, 0.05)
    with pytest.raises(ValueError, match="n >= 2"):
        paired_power(1, 0.5, 1.0, 0.05)
    with pytest.raises(ValueError, match="family_size"):
        planning_alpha(0.05, 0)
    assert seeds_for(0.1, 0.0, 0.05) == 2
