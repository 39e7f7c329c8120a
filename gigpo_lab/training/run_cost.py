"""A run's cost over every process that ran it: ``time/cpu_s`` and ``time/wall_s``.

``cpu_seconds`` counts this process (every thread) and its children that have ended and been waited for (game
generation). :class:`RunCost` is a Lightning callback whose state is the cost so far, written into every
checkpoint; a run resumed from a checkpoint starts from that state, so its final ``cpu_s`` and ``wall_s`` count
the processes before it too, up to the checkpoint each left (what a stopped process spent after its last
checkpoint is lost with it). ``study plan`` prices runs by ``cpu_s``.
"""

from __future__ import annotations

import os
import time

from lightning.pytorch.callbacks import Callback


def cpu_seconds() -> float:
    """User and system CPU seconds of this process (every thread) and of its children that have ended and been
    waited for (game generation workers); a child still running (a text benchmark's JVM) is not counted."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class RunCost(Callback):
    """The run's CPU seconds since ``cpu_start`` (``cpu_seconds()`` when the run's process began building it,
    so building the envs and the model is in it) and its wall seconds since ``fit`` began, plus what the
    checkpoint it resumed from had recorded."""

    def __init__(self, cpu_start: float) -> None:
        self.cpu_start = cpu_start
        self.wall_start: float | None = None
        self.before = {"cpu_s": 0.0, "wall_s": 0.0}

    def on_fit_start(self, trainer, pl_module) -> None:
        self.wall_start = time.perf_counter()

    def spent(self) -> dict[str, float]:
        """``{"cpu_s": ..., "wall_s": ...}``: the run's cost so far, over every process that ran it."""
        wall = 0.0 if self.wall_start is None else time.perf_counter() - self.wall_start
        return {
            "cpu_s": self.before["cpu_s"] + cpu_seconds() - self.cpu_start,
            "wall_s": self.before["wall_s"] + wall,
        }

    def state_dict(self) -> dict[str, float]:
        return self.spent()

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.before = {key: float(state_dict[key]) for key in self.before}
