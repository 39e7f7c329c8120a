"""Faults that need real processes and wall-clock time (``pytest -m slow``; docs/FAULTS.md lists them).

- a training process killed with SIGKILL mid-iteration, then resumed from its last checkpoint;
- the MLflow server process killed mid-run and restarted on the same port and backend, and killed again
  before the run ends (its writes go to the fallback file, imported afterwards);
- a multirun whose second job crashes mid-run.

Training runs as ``python -m gigpo_lab.cli train`` in its own process. Envs are ``tests.tracking.faulty_env.FaultyEnv``
(a real FrozenLake), paced by ``step_delay_s`` where a test needs a run of known length.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train
from tests.conftest import TINY
from tests.training.test_determinism import checkpoint_tensors, metric_histories

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def tiny(**changes) -> list[str]:
    """TINY with some keys changed (Hydra refuses two overrides of one key)."""
    keys = {o.split("=", 1)[0] for o in TINY}
    extra = [f"{k}={v}" for k, v in changes.items()]
    assert all(e.split("=", 1)[0] in keys for e in extra)
    return [o for o in TINY if o.split("=", 1)[0] not in changes] + extra


def paced(delay: float) -> list[str]:
    return [
        "env._target_=tests.tracking.faulty_env.make_faulty_env",
        "+env.fault=none",
        f"+env.step_delay_s={delay}",
    ]


def start_training(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    with log.open("w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "gigpo_lab.cli", "train", *args],
            cwd=cwd,
            env=ENV,
            stdout=f,
            stderr=subprocess.STDOUT,
        )


def wait_for(condition: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited (rc {proc.returncode}) while waiting for {what}")
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def max_step(db: Path, key: str = "train/loss") -> int:
    """The highest step of ``key`` in a sqlite MLflow store, read directly (-1 if none yet)."""
    if not db.exists():
        return -1
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute("SELECT MAX(step) FROM metrics WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:  # not created yet, or locked by the writer for a moment
        return -1
    return -1 if row[0] is None else int(row[0])


def assert_each_step_once(uri: str, iterations: int) -> dict:
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    histories = metric_histories(uri)
    for key, points in histories.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{key} has a step twice: {steps}"
    assert [s for s, _ in histories["train/loss"]] == list(range(iterations))
    assert [s for s, _ in histories["eval/success_rate"]] == list(range(iterations + 1))
    return histories


# ----------------------------------------------------------------------------- SIGKILL mid-iteration
def test_sigkill_mid_iteration_resumes_without_losing_or_repeating_a_metric_step(
    tmp_path, empty_mlflow_store
):
    """Checkpoints every 2 iterations: killed after iteration 2's metrics reached the store but before the
    next checkpoint, the run resumes from iteration 1's checkpoint, re-runs iteration 2 and writes none of
    its points twice; the metric history and the final weights equal an uninterrupted run's."""
    iterations = 6
    sizes = tiny(**{"trainer.iterations": iterations, "trainer.checkpoint_every": 2})
    db, out = tmp_path / "killed.db", tmp_path / "killed"
    for name in ("killed.db", "straight.db"):
        shutil.copyfile(empty_mlflow_store, tmp_path / name)
    args = [*sizes, *paced(0.02), f"output_dir={out}", f"tracking.uri=sqlite:///{db}"]
    proc = start_training([*args, f"hydra.run.dir={tmp_path / 'hydra'}"], tmp_path, tmp_path / "killed.log")
    try:
        wait_for(lambda: max_step(db) >= 2, 180, "iteration 2's metrics", proc)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    ckpts = out / "checkpoints"
    assert (ckpts / "iter0001.ckpt").is_file() and not (ckpts / "iter0003.ckpt").exists()
    assert not list(ckpts.glob("*.partial"))
    assert max_step(db) == 2, "the store holds a step the last checkpoint does not cover"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    (killed,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    assert killed.info.status == "RUNNING"

    train(compose_config([*args, f"ckpt_path={ckpts / 'last.ckpt'}"]))
    resumed = assert_each_step_once(f"sqlite:///{db}", iterations)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"

    ref_uri = f"sqlite:///{tmp_path / 'straight.db'}"
    train(
        compose_config(
            [*sizes, *paced(0.0), f"output_dir={tmp_path / 'straight'}", f"tracking.uri={ref_uri}"]
        )
    )
    straight = metric_histories(ref_uri)
    assert resumed == straight
    a = checkpoint_tensors(ckpts / "last.ckpt")
    b = checkpoint_tensors(tmp_path / "straight" / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


# ----------------------------------------------------------------------------- the MLflow server dies
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1:port over a sqlite backend, in its own process group."""

    def __init__(self, db: Path, port: int, folder: Path):
        self.db, self.port, self.folder = db, port, folder
        self.proc: subprocess.Popen | None = None
        self.uri = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 120) -> None:
        log = (self.folder / f"server-{time.time():.0f}.log").open("w")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "mlflow", "server"),
                *("--backend-store-uri", f"sqlite:///{self.db}"),
                *("--artifacts-destination", str(self.folder / "artifacts")),
                *("--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"),
            ],
            cwd=self.folder,
            env=ENV,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self.healthy, timeout, "the MLflow server", self.proc)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def crash(self) -> None:
        """SIGKILL the whole process group (the server and its workers): no clean shutdown."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        wait_for(lambda: not self.healthy(), 30, "the server to go away")


def test_mlflow_server_killed_mid_run_then_back_loses_no_metric_and_repeats_none(tmp_path):
    """Outage 1 (mid-run): writes are buffered and flushed when the restarted server answers. Outage 2 (until
    after the run): the run ends normally (exit 0) with a warning naming the fallback file, and
    ``gigpo-lab import-metrics`` sends its writes once the server is back."""
    iterations = 60
    server = MlflowServer(tmp_path / "server.db", _free_port(), tmp_path)
    server.start()
    out = tmp_path / "run"
    args = [
        *tiny(**{"trainer.iterations": iterations}),
        *paced(0.03),  # about 1 s an iteration
        f"output_dir={out}",
        f"tracking.uri={server.uri}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    proc = start_training(args, tmp_path, tmp_path / "train.log")
    try:
        wait_for(lambda: max_step(server.db) >= 2, 180, "iteration 2's metrics", proc)
        server.crash()
        fallback = lambda: list(out.glob("mlflow_unsent_*.jsonl"))  # noqa: E731
        wait_for(
            lambda: bool(fallback()) and len(fallback()[0].read_text().splitlines()) >= 3,
            60,
            "buffering",
            proc,
        )
        server.start()
        wait_for(lambda: not fallback(), 60, "the buffered writes to be flushed", proc)
        flushed_at = max_step(server.db)
        assert proc.poll() is None, "the run must still be going to test outage 2"
        wait_for(lambda: max_step(server.db) >= iterations - 8, 120, "the run's last iterations", proc)
        server.crash()
        assert proc.wait(180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        if server.proc and server.proc.poll() is None:
            server.crash()
    log = (tmp_path / "train.log").read_text()
    assert "unreachable" in log and "answers again" in log
    (left,) = fallback()
    assert f"gigpo-lab import-metrics {left}" in log
    assert max_step(server.db) < iterations - 1  # the last steps are only in the file

    server.start()
    imported = subprocess.run(
        [sys.executable, "-m", "gigpo_lab.cli", "import-metrics", str(left)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    assert "1 end status" in imported.stdout
    assert flushed_at > 2
    histories = assert_each_step_once(server.uri, iterations)
    assert len(histories["rollout/env_steps_total"]) == iterations
    client = MlflowClient(tracking_uri=server.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    assert run.info.status == "FINISHED" and "wall_s" in run.data.tags
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/last.ckpt"
    ]
    server.crash()


# ----------------------------------------------------------------------------- a multirun job crashes
def test_a_multirun_with_a_crashing_job_finishes_the_others_and_exits_non_zero(tmp_path, empty_mlflow_store):
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "-m",
        *TINY,
        "env._target_=tests.tracking.faulty_env.make_faulty_env",
        "+env.fault=none,raise,none",  # the second job's env raises in iteration 1
        "+env.fault_seeds=[2]",
        "rollout.max_env_error_rate=0",
        f"tracking.uri={uri}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "gigpo_lab.cli", "train", *args],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert "1 of 3 jobs of sweep" in done.stderr
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    jobs = {r.data.tags["sweep_job"]: r for r in runs if "sweep_job" in r.data.tags}
    assert {k: r.info.status for k, r in jobs.items()} == {"0": "FINISHED", "1": "FAILED", "2": "FINISHED"}
    assert "simulated env crash" in jobs["1"].data.tags["error"]
    assert [m.step for m in client.get_metric_history(jobs["2"].info.run_id, "train/loss")] == [0, 1]
    (parent,) = [r for r in runs if r.data.tags.get("gigpo_lab.role") == "sweep-parent"]
    assert parent.info.status == "FAILED" and parent.data.tags["jobs_failed"] == "1"
