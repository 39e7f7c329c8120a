"""A read of a sqlite store that a signal's exception cuts short, as SIGTERM cut MLflow's ``_get_run`` in a CI
run: the half-fetched cursor stays in the reading frame, which the exception's traceback keeps alive, and so
does the shared lock it holds, which blocks every other connection's commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path


def read_cut_short(store: Path, raise_signal: Callable[[], None]) -> None:
    """Start reading ``store`` (an MLflow store: dozens of rows in ``sqlite_master``), then ``raise_signal()``."""
    reader = sqlite3.connect(store)
    rows = reader.execute("SELECT name FROM sqlite_master")
    assert len(rows.fetchmany(2)) == 2  # rows are left, so the statement stays open
    raise_signal()
