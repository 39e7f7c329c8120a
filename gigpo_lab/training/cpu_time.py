"""``cpu_seconds``: the CPU time a run is charged. Imports nothing heavy, so ``train`` reads it before it imports
torch and Lightning (their import is part of a run's cost) and a test's child interpreter stays light."""

from __future__ import annotations

import os


def cpu_seconds() -> float:
    """User and system CPU seconds of this process (every thread) and of its children that have ended and been
    waited for (game generation workers); a child still running (a text benchmark's JVM) is not counted."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
