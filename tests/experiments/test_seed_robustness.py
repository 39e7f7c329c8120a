"""The collapse counts of experiments/bench/seed_robustness.py against a brute-force oracle of their
definitions (issue #12's collapse, and a relapse: a collapse after the invalid rate had settled)."""

from __future__ import annotations

from experiment_scripts import load_script
from hypothesis import given, settings
from hypothesis import strategies as st

seed_robustness = load_script("bench/seed_robustness.py")


def _oracle(success: list[float], invalid: list[float]) -> tuple[int, int]:
    def trained_before(i: int) -> bool:
        return any(s > 0.5 for s in success[:i])

    collapses = [i for i in range(len(success)) if trained_before(i) and invalid[i] > 0.3]
    settled = [j for j in range(len(success)) if trained_before(j) and invalid[j] <= 0.3]
    relapses = [i for i in collapses if any(j < i for j in settled)]
    return len(collapses), len(relapses)


def _count(success, invalid):
    return seed_robustness.count_collapses(dict(enumerate(success)), dict(enumerate(invalid)))


def test_a_falling_invalid_rate_counts_as_collapse_but_not_as_relapse():
    # gym FrozenLake's pattern: success passes 0.5 at iteration 1 while the invalid rate still falls
    assert _count([0.25, 0.66, 0.75, 0.92, 1.0], [0.82, 0.65, 0.48, 0.36, 0.27]) == (2, 0)


def test_a_rise_after_settling_is_a_relapse():
    assert _count([0.2, 0.9, 1.0, 0.1, 0.9], [0.5, 0.2, 0.1, 0.8, 0.2]) == (1, 1)


def test_an_untrained_run_has_neither():
    assert _count([0.0, 0.1, 0.2], [0.9, 0.9, 0.9]) == (0, 0)


rates = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(rates, rates), max_size=30))
def test_counts_match_the_brute_force_definitions(pairs):
    success, invalid = [p[0] for p in pairs], [p[1] for p in pairs]
    collapses, relapses = _count(success, invalid)
    assert (collapses, relapses) == _oracle(success, invalid)
    assert 0 <= relapses <= collapses
