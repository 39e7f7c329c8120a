"""Sweeps as real processes: no parent run is ever left RUNNING, even when the launcher cannot start."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [str(BIN / "gigpo-lab"), "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _runs(store: Path) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


@pytest.mark.skipif(shutil.which("srun") is not None, reason="this machine is a SLURM node")
def test_an_off_cluster_slurm_sweep_ends_its_parent_run_failed_with_the_reason(tmp_path):
    done = _train(["-m", "hydra/launcher=slurm", "seed=0,1"], tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-2:] == [
        'gigpo-lab train: RuntimeError: Could not detect "srun", are you indeed on a slurm cluster?',
        "  (verbose=true or HYDRA_FULL_ERROR=1 shows the traceback)",
    ]
    (parent,) = _runs(tmp_path / "mlflow.db")
    assert parent.data.tags["gigpo_lab.role"] == "sweep-parent"
    assert parent.info.status == "FAILED" and "srun" in parent.data.tags["error"]


def _child_runs(store: Path, status: str | None = None) -> int:
    """How many sweep jobs have opened a child run in ``store`` (of ``status`` only, when given), read through a
    read-only sqlite connection: an MlflowClient would create or migrate the store's tables itself, racing the
    launcher that is doing the same (a clean-clone CI run failed on "table _alembic_tmp_... already exists")."""
    import sqlite3

    if not store.exists():
        return 0
    query = (
        "SELECT COUNT(*) FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
        "WHERE tags.key = 'mlflow.parentRunId'" + (" AND runs.status = ?" if status else "")
    )
    try:
        with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1)) as db:
            return db.execute(query, (status,) if status else ()).fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not there yet, or the store is locked for a write
        return 0


def _launch_until(tmp_path: Path, args: list[str], ready, poll_s: float) -> subprocess.Popen:
    """``gigpo-lab train *args`` in ``tmp_path``, returned once ``ready(store)`` holds (the launcher must not
    exit before; at most 300 s)."""
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [str(BIN / "gigpo-lab"), "train", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    store, deadline = tmp_path / "mlflow.db", time.monotonic() + 300
    while not ready(store) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(poll_s)
    return proc


@pytest.mark.slow  # 13 s; SIGTERM at each point of a sweep stays in the default suite
def test_sigterm_to_the_launcher_ends_its_parent_run_failed(tmp_path):
    """``kill <launcher>`` mid-sweep (by hand, or a scheduler's time limit): the parent run says FAILED with
    the reason instead of staying RUNNING, and the command exits 143 (128 + SIGTERM)."""
    import signal

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_sizes import TINY

    args = [
        "-m",
        *TINY,
        "trainer.iterations=200",
        "hydra/launcher=local",
        "hydra.launcher.n_jobs=1",
        "seed=0,1",
    ]
    # until the first job has opened its child run
    proc = _launch_until(tmp_path, args, lambda store: _child_runs(store) > 0, poll_s=1)
    store = tmp_path / "mlflow.db"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    (parent,) = [r for r in _runs(store) if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert parent.info.status == "FAILED" and "SIGTERM" in parent.data.tags["error"], err[-3000:]


@pytest.mark.parametrize(
    "point",
    [
        # the FINISHED-after-SIGTERM race itself runs in the default suite; the other points are slow-marked
        pytest.param("fit", marks=pytest.mark.slow),
        pytest.param("fit-swallowed", marks=pytest.mark.slow),
        "job-end-swallowed",
        pytest.param("multirun-end-swallowed", marks=pytest.mark.slow),
    ],
)
def test_sigterm_at_each_point_of_a_sweep_ends_its_parent_failed_and_nothing_overwrites_it(tmp_path, point):
    """SIGTERM delivered at each point of a two-job sweep (``sigterm_points.py``), including where its
    exception is swallowed on the way up (raised inside a finalizer): the command exits 143 and the parent
    run ends FAILED with the reason, never FINISHED; no job starts after the signal."""
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_sizes import TINY

    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "OMP_NUM_THREADS": "1"}
    args = ["-m", *TINY, "hydra/launcher=local", "hydra.launcher.n_jobs=1", "seed=0,1"]
    done = subprocess.run(
        [sys.executable, str(REPO / "tests/tracking/sigterm_points.py"), point, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 143, done.stderr[-3000:]
    runs = _runs(tmp_path / "mlflow.db")
    (parent,) = [r for r in runs if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert parent.info.status == "FAILED", (point, parent.data.tags, done.stderr[-3000:])
    assert "SIGTERM" in parent.data.tags["error"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    started_after = {"fit": 1, "fit-swallowed": 1, "job-end-swallowed": 1, "multirun-end-swallowed": 2}[point]
    assert len(children) == started_after  # the second job never starts once the signal has landed
    assert all(r.info.status in ("FINISHED", "FAILED") for r in children)


def _local_sweep(iterations: int, n_jobs: int) -> list[str]:
    """A tiny two-seed multirun on the local (joblib) launcher: the arguments of ``_launch_until``/``_train``."""
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_sizes import TINY

    return [
        "-m",
        *TINY,
        f"trainer.iterations={iterations}",
        "hydra/launcher=local",
        f"hydra.launcher.n_jobs={n_jobs}",
        "seed=0,1",
    ]


def test_a_sweep_killed_midway_resumes_skipping_its_finished_jobs(tmp_path):
    """SIGKILL to the launcher after its first job finished (the parent and the second job's run stay
    RUNNING); the same command with resume=true reopens that parent, skips the finished job, runs the other
    again (its dead run tagged superseded_by the new one), and ends the sweep FINISHED with one run per job."""
    import signal

    args = _local_sweep(iterations=3, n_jobs=1)
    store = tmp_path / "mlflow.db"
    proc = _launch_until(tmp_path, args, lambda store: _child_runs(store, "FINISHED") >= 1, poll_s=0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    runs = _runs(store)
    (parent,) = [r for r in runs if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert parent.info.status == "RUNNING"  # SIGKILL: nothing could end it
    before = {r.info.run_id: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    done_before = {r.data.tags["seed"] for r in before.values() if r.info.status == "FINISHED"}
    assert done_before == {"0"}, {r.data.tags["seed"]: r.info.status for r in before.values()}

    resumed = _train([*args, "resume=true"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "finished earlier: skipped" in resumed.stdout + resumed.stderr
    runs = _runs(store)
    parents = [r for r in runs if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same sweep, reopened
    (parent,) = parents
    assert parent.info.status == "FINISHED" and parent.data.tags["resumed"] == "1"
    assert "error" not in parent.data.tags
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    latest = [r for r in children if "superseded_by" not in r.data.tags]
    assert sorted(r.data.tags["seed"] for r in latest) == ["0", "1"]
    assert all(r.info.status == "FINISHED" for r in latest)
    (skipped,) = [r for r in latest if r.data.tags["seed"] == "0"]
    assert skipped.info.run_id in before  # not run again
    superseded = [r for r in children if "superseded_by" in r.data.tags]
    assert all(r.info.run_id in before and r.data.tags["seed"] == "1" for r in superseded)
    (rerun,) = [r for r in latest if r.data.tags["seed"] == "1"]
    assert all(r.data.tags["superseded_by"] == rerun.info.run_id for r in superseded)


@pytest.mark.slow  # 33 s; SIGTERM to a plain launcher stays in the default suite
def test_sigterm_to_a_launcher_with_joblib_workers_leaves_no_job_run_running(tmp_path):
    """Two jobs in joblib worker processes when SIGTERM reaches the launcher: the workers stop with it and
    cannot end their runs, so the launcher ends them KILLED with the reason, and the parent FAILED."""
    import signal

    args = _local_sweep(iterations=300, n_jobs=2)
    store = tmp_path / "mlflow.db"
    proc = _launch_until(tmp_path, args, lambda store: _child_runs(store, "RUNNING") >= 2, poll_s=0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    runs = _runs(store)
    (parent,) = [r for r in runs if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert parent.info.status == "FAILED" and "SIGTERM" in parent.data.tags["error"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2
    assert all(r.info.status in ("KILLED", "FAILED") for r in children), [r.info.status for r in children]
    assert all("launcher stopped" in r.data.tags["error"] for r in children if r.info.status == "KILLED")
