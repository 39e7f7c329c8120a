"""``examples(default, thorough)``: the count each property test draws, and the marker ``make test-slow`` selects."""

from __future__ import annotations

import property_examples
from hypothesis import given
from hypothesis import strategies as st


def _decorated(monkeypatch, thorough: bool):
    monkeypatch.setattr(property_examples, "THOROUGH", thorough)
    drawn = []

    @property_examples.examples(3, 7)
    @given(st.integers())
    def prop(x):
        drawn.append(x)

    prop()
    return prop, drawn


def test_the_default_suite_draws_the_default_count(monkeypatch):
    prop, drawn = _decorated(monkeypatch, thorough=False)
    assert len(drawn) == 3
    assert [m.name for m in prop.pytestmark] == ["property"]


def test_thorough_draws_the_thorough_count_and_the_same_examples_each_time(monkeypatch):
    _, first = _decorated(monkeypatch, thorough=True)
    _, again = _decorated(monkeypatch, thorough=True)
    assert len(first) == 7 and first == again  # derandomized
