"""How many examples the estimators' property tests draw: a quick pass in the default suite, a thorough one in
``make test-slow``, which runs every test so decorated again with ``--thorough``.

The estimators' oracle and invariant tests are most of the default suite's CPU when they draw hundreds of
examples each. Each states both counts here; the thorough pass is derandomized, so it draws the same examples on
every run and a failure there reproduces.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings

#: True under ``pytest --thorough`` (set by tests/conftest.py's ``pytest_configure``, before any test module is
#: imported).
THOROUGH = False


def examples(default: int, thorough: int) -> Callable:
    """A decorator for a ``@given`` test: ``default`` examples, or ``thorough`` derandomized ones under
    ``--thorough``; no deadline; the test is marked ``property`` (the marker ``make test-slow`` selects)."""

    def decorate(test: Callable) -> Callable:
        # the quick pass leaves ``derandomize`` to the loaded profile: Hypothesis's own ``ci`` profile (loaded when
        # CI is set) derandomizes it too
        fixed = {"derandomize": True} if THOROUGH else {}
        chosen = settings(
            max_examples=thorough if THOROUGH else default,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            **fixed,
        )
        return pytest.mark.property(chosen(test))

    return decorate
