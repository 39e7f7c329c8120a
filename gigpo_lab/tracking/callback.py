"""``IterationLogger``: the Lightning callback that writes each iteration's metrics and samples to MLflow.

It only observes: the module runs the whole iteration in its ``training_step`` and queues what it produced
(``pending_metrics``, ``pending_samples``). Lightning then calls this callback's ``on_train_epoch_end`` before
``ModelCheckpoint``'s (``gigpo_lab/training/module.py``, module docstring), so an iteration's metrics are written
before the checkpoint that follows it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import lightning as L

from gigpo_lab.tracking.buffer import BufferedRun
from gigpo_lab.tracking.mlflow_tracker import MlflowTracker


class IterationLogger(L.Callback):
    """Write the metrics and samples the module queued for each iteration, in one batch.

    Args:
        tracker: the run's writer: a ``BufferedRun`` (buffers while the store is unreachable, never writes a
            metric point twice), an ``MlflowTracker``, or None to keep metrics in memory only.
        open_run: what ``train`` passes instead: called once on global rank 0 when training starts (after
            every rank is up, so a launch that dies first leaves no run behind); returns the writer.
    """

    def __init__(
        self,
        tracker: BufferedRun | MlflowTracker | None = None,
        open_run: Callable[[], BufferedRun] | None = None,
    ) -> None:
        self.tracker = tracker
        self.open_run = open_run
        #: every (step, metrics) written, in order; ``train()`` returns the last values from it.
        self.history: list[tuple[int, dict[str, float]]] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module) -> None:
        """One job, one MLflow run: on any rank but global rank 0 keep metrics in memory only (this also covers
        strategies that copy the callback into spawned workers); on rank 0 open the run if asked to."""
        if not trainer.is_global_zero:
            self.tracker = None
        elif self.open_run is not None:
            self.tracker, self.open_run = self.open_run(), None
            pl_module.mlflow_run_id = self.tracker.run_id

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module) -> None:
        self.flush(pl_module)

    def flush(self, pl_module) -> None:
        """Write and forget what ``pl_module`` queued (also called by ``train`` when a run fails)."""
        for step, metrics in pl_module.pending_metrics:
            self.history.append((step, metrics))
            if self.tracker is not None:
                self.tracker.log_metrics(metrics, step=step)
        pl_module.pending_metrics.clear()
        for step, rows in pl_module.pending_samples:
            if self.tracker is not None:
                text = "\n".join(json.dumps(r) for r in rows) + "\n"
                self.tracker.log_text(text, f"samples/iteration_{step:05d}.jsonl")
        pl_module.pending_samples.clear()

    def final_metrics(self) -> dict[str, float]:
        """The latest value of every metric written so far."""
        out: dict[str, float] = {}
        for _, metrics in self.history:
            out.update(metrics)
        return out
