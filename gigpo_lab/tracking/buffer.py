"""``BufferedRun``: the run's writes during training, kept (not lost, not fatal) while the store is away.

Training does not stop because the MLflow server went away for a minute. Every write made after the run
started (an iteration's metrics, a samples text, tags, the checkpoint artifact, the end status) goes
through ``BufferedRun``:

- the store answers: the write goes through at once, after anything still waiting (order is kept);
- it does not: the write waits in memory and is appended to a local JSONL file
  (``<output_dir>/mlflow_unsent_<time>_<pid>.jsonl``, one record a line), with one warning per outage.
  Each later write first probes the store (no retries, 5 s timeout) and sends what waits; once all of it
  has reached the store the file is removed;
- the run ends with writes still waiting: the file stays, and a warning names the command that sends it
  later, ``gigpo-lab import-metrics <file>`` (which skips what the store already holds).

Metric points ``(key, step)`` that the store already holds are never written again (``skip``). A run
resumed from a checkpoint re-runs the iterations after it, whose metrics a killed process may already have
written; MLflow cannot delete a metric point, so the re-run's points for those steps are dropped (on the CPU
they are bit-identical to the ones kept, see ``docs/FAULTS.md``).

Record layout (``kind`` decides the other fields)::

    {"kind": "metrics", "uri": …, "run_id": …, "step": 3, "timestamp_ms": …, "metrics": {"train/loss": 0.1}}
    {"kind": "text", …, "artifact_file": "samples/iteration_00003.jsonl", "text": "…"}
    {"kind": "tags", …, "tags": {"wall_s": "12.0"}}
    {"kind": "artifact", …, "path": "/abs/last.ckpt", "artifact_path": "checkpoints"}
    {"kind": "end", …, "status": "FINISHED"}
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gigpo_lab.tracking.mlflow_tracker import CHECK_RETRIES, CHECK_TIMEOUT_S, MlflowTracker, http_limits

log = logging.getLogger(__name__)


def apply_record(tracker: MlflowTracker, record: Mapping[str, Any], skip: set[tuple[str, int]]) -> int:
    """Send one record to ``tracker``'s run; metric points in ``skip`` are left out (and sent ones added).

    Returns the number of metric points written (0 for other kinds).
    """
    kind = record["kind"]
    if kind == "metrics":
        step = int(record["step"])
        fresh = {k: v for k, v in record["metrics"].items() if (k, step) not in skip}
        if fresh:
            tracker.log_metrics(fresh, step=step, timestamp_ms=record.get("timestamp_ms"))
            skip.update((k, step) for k in fresh)
        return len(fresh)
    if kind == "text":
        tracker.log_text(record["text"], record["artifact_file"])
    elif kind == "tags":
        tracker.set_tags(record["tags"])
    elif kind == "artifact":
        tracker.log_artifact(record["path"], record.get("artifact_path"))
    elif kind == "end":
        tracker.end(record["status"])
    else:
        raise ValueError(f"unknown record kind {kind!r}; expected metrics, text, tags, artifact or end")
    return 0


class BufferedRun:
    """The writes of one started run, buffered in memory and in a JSONL file while the store is unreachable.

    Args:
        tracker: the started ``MlflowTracker`` (its ``run_id`` is set).
        fallback_dir: where the JSONL file of unsent writes goes (the run's output folder).
        skip: ``(key, step)`` metric points the store already holds (``tracker.logged_points()`` on resume).
    """

    def __init__(
        self, tracker: MlflowTracker, fallback_dir: str | os.PathLike, skip: Iterable[tuple[str, int]] = ()
    ):
        self.tracker = tracker
        self.run_id = tracker.run_id
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.fallback = Path(fallback_dir) / f"mlflow_unsent_{stamp}_{os.getpid()}.jsonl"
        self.skip: set[tuple[str, int]] = set(skip)
        self.waiting: list[dict[str, Any]] = []
        self.outages = 0

    @property
    def unsent(self) -> int:
        """Writes that have not reached the store (they are in ``fallback``)."""
        return len(self.waiting)

    # ----------------------------------------------------------------- the tracker's write interface
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        values = {k: float(v) for k, v in metrics.items()}
        self._write({"kind": "metrics", "step": int(step), "timestamp_ms": _now_ms(), "metrics": values})

    def log_text(self, text: str, artifact_file: str) -> None:
        self._write({"kind": "text", "artifact_file": artifact_file, "text": text})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._write({"kind": "tags", "tags": {k: str(v) for k, v in tags.items()}})

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._write({"kind": "artifact", "path": str(Path(path).resolve()), "artifact_path": artifact_path})

    def end(self, status: str = "FINISHED") -> bool:
        """Close the run (or queue its closing); True when every write of the run has reached the store."""
        self._write({"kind": "end", "status": status})
        if self.waiting:
            log.warning(
                "the MLflow store %s is still unreachable: %d writes of run %s were not sent and are kept in "
                "%s; send them later with `gigpo-lab import-metrics %s`",
                self.tracker.uri,
                len(self.waiting),
                self.run_id,
                self.fallback,
                self.fallback,
            )
        return not self.waiting

    # ----------------------------------------------------------------- buffering
    def _write(self, record: dict[str, Any]) -> None:
        record = {"uri": self.tracker.uri, "run_id": self.run_id, **record}
        if self.waiting and not self._drain():
            self._keep(record)
            return
        try:
            apply_record(self.tracker, record, self.skip)
        except Exception as err:  # the store is unreachable (or refused the write): keep it for later
            self._outage(err)
            self._keep(record)

    def _keep(self, record: dict[str, Any]) -> None:
        self.waiting.append(record)
        with self.fallback.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _outage(self, err: Exception) -> None:
        self.outages += 1
        log.warning(
            "MLflow store %s unreachable (%s: %s); training goes on, writes are buffered and kept in %s "
            "until it answers again",
            self.tracker.uri,
            type(err).__name__,
            str(err).splitlines()[0][:300] if str(err) else "",
            self.fallback,
        )

    def _drain(self) -> bool:
        """Probe the store and send what waits, oldest first; True when nothing waits any more."""
        try:
            with http_limits(self.tracker.uri, CHECK_RETRIES, CHECK_TIMEOUT_S, override=True):
                # a write whose answer was lost may have reached the store: never send a point twice
                self.skip |= self.tracker.logged_points()
        except Exception:
            return False
        sent = 0
        while self.waiting:
            try:
                apply_record(self.tracker, self.waiting[0], self.skip)
            except Exception:
                return False
            self.waiting.pop(0)
            sent += 1
        log.warning("MLflow store %s answers again: %d buffered writes sent", self.tracker.uri, sent)
        self.fallback.unlink(missing_ok=True)  # everything in it has reached the store
        return True


def _now_ms() -> int:
    return int(time.time() * 1000)
