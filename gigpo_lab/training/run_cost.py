"""A run's cost over every process that ran it: ``time/cpu_s`` and ``time/wall_s``.

:class:`RunCost` is a Lightning callback whose state is the cost so far, written into every checkpoint
(``last.ckpt``, ``on_exception.ckpt``). A run resumed from a checkpoint (``ckpt_path=...``) starts from that
state, so its final ``cpu_s`` and ``wall_s`` count the processes before it too, up to the checkpoint each left:
what a stopped process spent after its last checkpoint is lost with it, and a run started again from scratch
(a study job stopped mid-run) is a new run that counts only itself. ``study plan`` prices runs by ``cpu_s``.
"""

from __future__ import annotations

import time

from lightning.pytorch.callbacks import Callback

from gigpo_lab.training.cpu_time import cpu_seconds


class RunCost(Callback):
    """The run's CPU seconds since ``cpu_start`` (``cpu_seconds()`` when ``train`` began, before it imported
    torch, so importing, building the envs and the model are in it) and its wall seconds since
    ``start_wall()`` (just before ``fit``), plus what the checkpoint it resumed from had recorded."""

    def __init__(self, cpu_start: float) -> None:
        self.cpu_start = cpu_start
        self.wall_start: float | None = None
        self.before = {"cpu_s": 0.0, "wall_s": 0.0}

    def start_wall(self) -> None:
        """Start the wall clock: ``train`` calls it just before ``trainer.fit`` (setup and restore are in it)."""
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
