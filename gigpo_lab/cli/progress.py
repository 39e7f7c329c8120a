"""``ProgressLine``: one line of progress that counts iterations 1..N and fits 100 columns.

On a terminal the line is redrawn in place (``\\r``) after every iteration::

    iter  12/40 ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━────────────  success 0.25  eval 0.50  812 tok/s  0:12 < 0:28

When stderr is not a terminal (a log file, CI, a pipe) it prints the same text as a plain line every few
iterations (about five lines a run, and always the last iteration) instead of carriage returns. Global rank
0 only. It replaces Lightning's progress bar, which counted 0-based epochs, showed ``--`` as the total and
wrapped at 100 columns.
"""

from __future__ import annotations

import math
import shutil
import sys
import time

import lightning as L

#: The widest line, whatever the terminal says (the issue's budget: 100 columns).
MAX_WIDTH = 100
#: Plain-text lines per run when stderr is not a terminal (plus the last iteration).
PLAIN_LINES = 5


def _clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def render(it: int, total: int, metrics: dict[str, float], elapsed: float, width: int, bar: bool) -> str:
    """The progress text after iteration ``it`` (1-based) of ``total``, at most ``width`` columns."""
    parts = []

    def metric(label: str, key: str, fmt: str) -> None:
        value = metrics.get(key)
        if value is not None and math.isfinite(value):
            parts.append(f"{label}{value:{fmt}}" if label else f"{value:{fmt}}")

    metric("success ", "rollout/success_rate", ".2f")
    metric("eval ", "eval/success_rate", ".2f")
    tokens = metrics.get("perf/tokens_per_s")
    if tokens is not None and math.isfinite(tokens):
        parts.append(f"{tokens:.0f} tok/s")
    left = elapsed / it * (total - it)
    parts.append(f"{_clock(elapsed)} < {_clock(left)}")
    head = f"iter {it:>{len(str(total))}}/{total}"
    tail = "  " + "  ".join(parts)
    room = width - len(head) - len(tail) - 1
    if bar and room >= 10:
        filled = round(room * it / total)
        head += " " + "━" * filled + "─" * (room - filled)
    return (head + tail)[:width]


class ProgressLine(L.Callback):
    """After each iteration: the progress text from the metrics ``source`` wrote last.

    Args:
        source: the run's ``IterationLogger`` (its ``history`` holds each iteration's metrics).
        total: the run's iteration count (``trainer.iterations``).
        stream: where to write (default stderr); a terminal gets the redrawn line.
    """

    def __init__(self, source, total: int, stream=None) -> None:
        self.source, self.total = source, int(total)
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = max(1, math.ceil(self.total / PLAIN_LINES))
        self.start = time.perf_counter()
        self.seen: dict[str, float] = {}  # eval metrics appear every eval_every iterations: keep the last
        self.read = 0  # history entries already folded into ``seen``

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        for _, metrics in self.source.history[self.read :]:  # this iteration's points (eval has its own)
            self.seen.update(metrics)
        self.read = len(self.source.history)
        it = trainer.current_epoch + 1
        width = min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns) if self.live else MAX_WIDTH
        text = render(it, self.total, self.seen, time.perf_counter() - self.start, width - 1, self.live)
        if self.live:
            self.stream.write("\r" + text + "\x1b[K")
        elif it % self.every == 0 or it == self.total:
            self.stream.write(text + "\n")
        self.stream.flush()

    def on_train_end(self, trainer, pl_module) -> None:
        if self.live and trainer.is_global_zero:
            self.stream.write("\n")
            self.stream.flush()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.on_train_end(trainer, pl_module)
