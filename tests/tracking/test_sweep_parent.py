"""The sweep parent run's last moments, in process, on a real sqlite store: SIGTERM's handler and
``fail_open_sweeps`` never lose an open parent run, even when the store cannot take the write at that moment."""

from __future__ import annotations

import contextlib
import signal
import sqlite3

import pytest

from gigpo_lab.tracking import sweep
from gigpo_lab.tracking.mlflow_tracker import MlflowTracker
from tests.tracking.cut_short import read_cut_short


@pytest.fixture(autouse=True)
def _sigterm_handler_restored():
    """``on_multirun_start`` installs the launcher's SIGTERM handler; this worker process gets its own back."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


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


def _sweep_config(tmp_path, overrides: list[str], command_line: list[str] = ()):
    """A sweep's composed config with its Hydra node, as the launcher sees it: ``overrides`` composed, and
    ``command_line`` (sweep overrides such as ``seed=0,1``, which compose refuses) added to the task overrides."""
    from omegaconf import OmegaConf, open_dict

    from gigpo_lab.config_paths import compose_config

    cfg = compose_config(
        [*overrides, f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"], return_hydra_config=True
    )
    with open_dict(cfg):
        OmegaConf.update(cfg, "hydra.overrides.task", [*cfg.hydra.overrides.task, *command_line])
    return cfg


@pytest.mark.parametrize(
    ("overrides", "command_line", "expected"),
    [
        (["sweeps=estimators"], [], 8 * 10),  # its params: 8 estimators x seeds 0-9
        (["sweeps=estimators"], ["seed=0,1"], 8 * 2),  # the command's sweep replaces the file's
        ([], ["estimator=grpo,gigpo", "seed=range(0,5)", "loss.clip_ratio=0.1,0.2"], 2 * 5 * 2),
        ([], ["seed=3"], 1),
        ([], ["estimator=glob(gi*)", "seed=0,1"], None),  # a glob needs Hydra's config loader: no plan
    ],
)
def test_planned_jobs_expands_the_grid_as_the_basic_sweeper_does(tmp_path, overrides, command_line, expected):
    assert sweep.planned_jobs(_sweep_config(tmp_path, overrides, command_line)) == expected


def test_another_sweeper_has_no_plan(tmp_path):
    from omegaconf import open_dict

    cfg = _sweep_config(tmp_path, ["sweeps=estimators"])
    with open_dict(cfg):
        cfg.hydra.sweeper._target_ = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    assert sweep.planned_jobs(cfg) is None


def test_a_sweep_whose_jobs_did_not_all_run_ends_failed_with_the_count(tmp_path, state, monkeypatch):
    """The sweeper returned, but one planned job has no run (a launcher that stopped early): FAILED, and the
    reason says how many never ran; the command's summary says it too."""
    for env in (sweep.PARENT_ENV, sweep.SWEEP_ENV):
        monkeypatch.delenv(env, raising=False)
    cfg = _sweep_config(tmp_path, [], ["seed=0,1"])
    callback = sweep.MlflowSweepCallback(state)
    callback.on_multirun_start(cfg)
    assert callback.planned == 2
    child = MlflowTracker(
        callback.tracker.uri, cfg.tracking.experiment, parent_run_id=callback.tracker.run_id
    )
    child.start()
    child.end("FINISHED")
    callback.on_multirun_end(cfg)
    assert _status(callback.tracker) == ("FAILED", "1 of 2 planned jobs never ran")
    assert callback.tracker.client.get_run(callback.tracker.run_id).data.tags["jobs_planned"] == "2"
    (ended,) = state.ended
    assert "1 of 2 planned jobs never ran" in ended.failure and state.open_parents == []


def test_a_sweep_that_ran_every_job_ends_finished(tmp_path, state, monkeypatch):
    for env in (sweep.PARENT_ENV, sweep.SWEEP_ENV):
        monkeypatch.delenv(env, raising=False)
    cfg = _sweep_config(tmp_path, [], ["seed=0,1"])
    callback = sweep.MlflowSweepCallback(state)
    callback.on_multirun_start(cfg)
    for _ in range(2):
        child = MlflowTracker(
            callback.tracker.uri, cfg.tracking.experiment, parent_run_id=callback.tracker.run_id
        )
        child.start()
        child.end("FINISHED")
    callback.on_multirun_end(cfg)
    assert _status(callback.tracker) == ("FINISHED", None)
    assert state.failures() == []


def test_a_jobs_key_is_its_overrides_without_resume_in_any_order():
    from gigpo_lab.tracking.sweep_resume import job_key, without_resume

    assert without_resume(["seed=1", "resume=true", "+resume=false", "estimator=grpo"]) == [
        "seed=1",
        "estimator=grpo",
    ]
    assert job_key(["seed=1", "estimator=grpo", "resume=true"]) == job_key(["estimator=grpo", "seed=1"])
    assert job_key(["seed=1"]) != job_key(["seed=10"])


def _parent(uri: str, overrides: str, status: str, sweep_id: str) -> str:
    from gigpo_lab.tracking.sweep_env import ROLE_TAG

    tracker = MlflowTracker(
        uri, "sweeps", tags={ROLE_TAG: "sweep-parent", "sweep_overrides": overrides, "sweep_id": sweep_id}
    )
    tracker.start()
    if status != "RUNNING":
        tracker.end(status)
    return tracker.run_id


def test_resume_finds_the_latest_sweep_with_the_overrides_quotes_included(tmp_path):
    import subprocess
    import time

    from gigpo_lab.tracking.sweep_resume import SweepStillRunning, parent_to_resume

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    quoted = "seed=0,1 model.path='/data/my model'"
    killed = _parent(uri, quoted, "FAILED", "multirun-1-1-999999999")
    client = MlflowTracker(uri, "sweeps").client
    exp = client.get_experiment_by_name("sweeps").experiment_id
    assert parent_to_resume(client, exp, quoted).info.run_id == killed
    assert parent_to_resume(client, exp, "seed=0,1") is None  # other overrides
    time.sleep(0.01)
    _parent(uri, quoted, "FINISHED", "multirun-1-2-999999998")  # a later complete sweep: nothing to resume
    assert parent_to_resume(client, exp, quoted) is None
    live = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.01)
        _parent(uri, quoted, "RUNNING", f"multirun-1-3-{live.pid}")  # its launcher is alive
        with pytest.raises(SweepStillRunning, match="is still running"):
            parent_to_resume(client, exp, quoted)
    finally:
        live.kill()
        live.wait()
    assert parent_to_resume(client, exp, quoted).data.tags["sweep_id"].endswith(str(live.pid))  # now dead


def test_what_a_run_keeps_and_where_it_reports_are_no_part_of_its_key():
    """A study's light-run switches, its row file and its tags leave the job key alone, so a sweep resumed
    with ``--keep-checkpoints`` (or after an amendment changed the spec hash tag) finds its finished jobs."""
    from gigpo_lab.tracking.sweep_resume import job_key

    light = ["seed=1", "trainer.keep_checkpoints=false", "tracking.log_checkpoint=false",
             "trainer.checkpoint_frozen_base=false",
             "tracking.row_file='/s/runs/a/seed_${seed}.json'", "+tracking.tags.study_spec_hash=abc"]  # fmt: skip
    assert job_key(light) == job_key(["seed=1"])
    assert job_key(["seed=1", "trainer.checkpoint_every=2"]) != job_key(["seed=1"])  # that one is identity


def test_a_store_read_cut_short_by_sigterm_does_not_lock_the_parent_run_out(parent, state, tmp_path):
    with pytest.raises(sweep.Terminated) as caught:
        read_cut_short(tmp_path / "mlflow.db", lambda: state.raise_terminated(signal.SIGTERM, None))
    sweep.fail_open_sweeps(state, caught.value)  # with the exception, and its traceback, still alive
    assert _status(parent) == ("FAILED", "Terminated: the sweep's launcher received SIGTERM")
    assert state.open_parents == []
