"""experiments/estimator_rows.py: the per-seed rows of an estimator sweep, on synthetic rows with a known
answer."""

from __future__ import annotations

import pytest
from experiment_scripts import load_script


def _rows():
    rows = []
    for seed in range(4):
        rows.append(
            {
                "estimator": "gigpo",
                "seed": seed,
                "eval_final": 1.0,
                "eval_auc": 0.5,
                "greedy_success": 1.0,
                "stream_ratio_median_first10": 0.5,
            }
        )
        rows.append(
            {
                "estimator": "grpo",
                "seed": seed,
                "eval_final": [0.0, 1.0][seed % 2],
                "eval_auc": 0.25,
                "greedy_success": 0.0,
                "stream_ratio_median_first10": 0.6,
            }
        )
    return rows


def test_a_constant_sample_has_a_point_interval_and_the_doses_are_compared():
    script = load_script("estimator_rows.py")
    assert script.mean_ci([0.7, 0.7, 0.7]) == (pytest.approx(0.7), pytest.approx(0.7), pytest.approx(0.7))
    mean, lo, hi = script.mean_ci([0.0, 1.0, 0.0, 1.0])
    # resampled means of four 0/1 values take the values k/4; the 2.5% and 97.5% quantiles are 0 and 1 with
    # overwhelming probability (P(all four equal) = 2/16 per resample, far above 2.5%)
    assert (mean, lo, hi) == (0.5, 0.0, 1.0)
    text = script.table(_rows())
    assert (
        "| gigpo | 4 | 1.000 [1.000, 1.000] | 0.500 [0.500, 0.500] | 1.000 [1.000, 1.000] | 0.500 |" in text
    )
    assert "| grpo | 4 | 0.500 [0.000, 1.000] |" in text
    assert text.endswith("Largest ratio between two estimators' median doses: 1.200")
