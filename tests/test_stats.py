"""Student-t quantiles and confidence intervals without scipy, checked against printed tables and by hand."""

from __future__ import annotations

import math

import pytest

from gigpo_lab.tracking.stats import (
    regularized_incomplete_beta,
    sample_std,
    summarize_values,
    t_cdf,
    t_quantile,
)

#: Two-sided 95% critical values t_{0.975, df} as printed in standard t tables (3 decimals).
T_TABLE_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 30: 2.042, 100: 1.984}


@pytest.mark.parametrize("df,expected", sorted(T_TABLE_975.items()))
def test_t_quantile_matches_the_printed_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_matches_the_closed_forms_for_one_and_two_degrees_of_freedom():
    for p in (0.6, 0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)  # Cauchy
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)


def test_t_quantile_tends_to_the_normal_quantile_and_is_symmetric():
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    assert t_quantile(0.95, 10) == pytest.approx(1.812, abs=5e-4)
    assert t_quantile(0.025, 5) == pytest.approx(-t_quantile(0.975, 5), rel=1e-12)
    assert t_cdf(-1.3, 4) + t_cdf(1.3, 4) == pytest.approx(1.0, abs=1e-14)
    assert t_cdf(0.0, 7) == pytest.approx(0.5, abs=1e-15)


def test_incomplete_beta_edges_and_a_known_value():
    assert regularized_incomplete_beta(2, 3, 0.0) == 0.0
    assert regularized_incomplete_beta(2, 3, 1.0) == 1.0
    # I_x(1, b) = 1 - (1 - x)^b
    assert regularized_incomplete_beta(1.0, 3.0, 0.3) == pytest.approx(1 - 0.7**3, rel=1e-12)
    assert regularized_incomplete_beta(1.0, 3.0, 0.9) == pytest.approx(1 - 0.1**3, rel=1e-12)


def test_ci_of_three_seeds_by_hand():
    """n = 3: mean 0.5, s = sqrt(0.26 / 2) = 0.36056, half width = 4.303 · s / sqrt(3) = 0.8957."""
    s = summarize_values([0.2, 0.4, 0.9])
    assert (s.n, s.mean) == (3, pytest.approx(0.5))
    assert s.std == pytest.approx(math.sqrt(0.13), rel=1e-12)
    assert s.half_width == pytest.approx(4.303 * math.sqrt(0.13) / math.sqrt(3), abs=1e-4)
    assert s.half_width == pytest.approx(0.8957, abs=1e-4)
    assert (s.ci_low, s.ci_high) == (pytest.approx(0.5 - s.half_width), pytest.approx(0.5 + s.half_width))


def test_other_levels_and_degenerate_sizes():
    s90 = summarize_values([1.0, 2.0, 3.0, 4.0], level=0.90)
    assert s90.half_width == pytest.approx(2.353 * sample_std([1, 2, 3, 4]) / 2.0, abs=1e-3)  # t_{0.95,3}
    one = summarize_values([0.7])
    assert one.n == 1 and one.mean == 0.7 and math.isnan(one.std) and math.isnan(one.ci_low)
    none = summarize_values([])
    assert none.n == 0 and math.isnan(none.mean)
    same = summarize_values([0.25, 0.25, 0.25])
    assert same.std == 0.0 and same.half_width == 0.0


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="must lie in"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="df=0"):
        t_cdf(1.0, 0)
