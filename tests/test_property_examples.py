"""``examples(default, thorough)``: the count each property test draws, and the marker ``make test-slow`` selects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


_drawn: list[int] = []


@property_examples.examples(3, 7)
@given(st.integers())
def _draw(x):  # decorated when this module is imported, as every property test is
    _drawn.append(x)


def test_the_count_follows_the_thorough_option(request):
    _drawn.clear()
    _draw()
    assert len(_drawn) == (7 if request.config.getoption("--thorough") else 3)


def test_the_thorough_option_reaches_the_modules_a_worker_imports():
    """``make test-slow``'s pass: ``--thorough`` on the command line, an xdist worker, a module decorated at import."""
    test = f"{Path(__file__).name}::test_the_count_follows_the_thorough_option"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", "--thorough", test],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
