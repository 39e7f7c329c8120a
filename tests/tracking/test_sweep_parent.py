"""The sweep parent run's last moments, in process, on a real sqlite store: SIGTERM's handler and
``fail_open_sweeps`` never lose an open parent run, even when the store cannot take the write at that moment."""

from __future__ import annotations

import contextlib
import signal
import sqlite3

import pytest

from gigpo_lab.tracking import sweep
from gigpo_lab.tracking.mlflow_tracker import MlflowTracker


@pytest.fixture
def state():
    """The launcher's sweep state, as ``gigpo-lab train`` makes it."""
    return sweep.SweepState()


@pytest.fixture
def parent(tmp_path, state):
    """An open sweep parent run, registered in ``state`` as the launcher registers it."""
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "sweeps", run_name="parent")
    tracker.start()
    state.open_parents.append(tracker)
    return tracker


def _status(tracker: MlflowTracker) -> tuple[str, str | None]:
    run = tracker.client.get_run(tracker.run_id)
    return run.info.status, run.data.tags.get("error")


def test_the_sigterm_handler_raises_without_writing_and_the_parent_is_ended_after_the_unwind(
    parent, state, tmp_path
):
    # The launcher's own thread is in the middle of a write to the store when the signal lands (a job's child
    # run logging an iteration): a raw connection holding the write lock stands for that interrupted write.
    with contextlib.closing(sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(sweep.Terminated) as caught:
            state.raise_terminated(signal.SIGTERM, None)
        assert caught.value.code == 143 and state.terminated is caught.value
        assert state.open_parents == [parent]  # not dropped by a write that could not get the lock
        writer.execute("ROLLBACK")  # the interrupted write unwinds
    sweep.fail_open_sweeps(state, caught.value)  # what ``gigpo_lab.cli.train.main`` does with the exception
    assert _status(parent) == ("FAILED", "Terminated: the sweep's launcher received SIGTERM")
    assert state.open_parents == []


def test_a_parent_run_that_cannot_be_ended_stays_open_for_the_next_call(parent, state):
    parent.client.delete_run(parent.run_id)  # a write to a deleted run is refused by MLflow
    err = RuntimeError("the launcher died")
    sweep.fail_open_sweeps(state, err)
    assert state.open_parents == [parent]
    parent.client.restore_run(parent.run_id)
    sweep.fail_open_sweeps(state, err)
    assert _status(parent) == ("FAILED", "RuntimeError: the launcher died")
    assert state.open_parents == []
