"""A rank that dies under ``lightning=ddp`` or ``lightning=fsdp`` leaves its MLflow run FAILED, naming the rank
and the reason, never RUNNING (issue #44; gigpo_lab/training/rank_failures.py says why it stayed RUNNING).

Each test runs ``gigpo-lab train`` on 2 CPU ranks (gloo) as the README types it, so Lightning relaunches the
command for rank 1 and watches it from rank 0. A rank dies for real: it raises (a real env that fails on
rank 1's seeds), or it is sent SIGKILL by the test (rank 1, a child of rank 0, or rank 0 itself) while the
other rank is in a rollout paced to last longer than Lightning's 5 s watch period. The real sqlite store is
read afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.tiny_sizes import TINY

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
TWO_CPU_RANKS = ["lightning.accelerator=cpu", "lightning.devices=2", "lightning.precision=32-true"]
#: Every step of a rollout sleeps this long: with sokoban (every episode lasts env.max_turns=4 steps) a
#: rank's first rollout takes 2 groups x 2 envs x 4 steps x 0.5 s = 8 s, longer than Lightning's 5 s watch.
PACED = [
    "env=sokoban",
    "env._target_=tests.tracking.faulty_env.make_faulty_env",
    "+env.fault=none",
    "+env.step_delay_s=0.5",
]


def start_job(tmp_path: Path, store: Path, *overrides: str) -> subprocess.Popen:
    """``gigpo-lab train`` on 2 CPU ranks (50 iterations, no evaluation), tracked in ``store``."""
    keep = [o for o in TINY if not o.startswith(("trainer.iterations=", "trainer.eval_every="))]
    args = [
        *keep,
        "trainer.iterations=50",
        "trainer.eval_every=0",
        *TWO_CPU_RANKS,
        f"output_dir={tmp_path / 'out'}",
        f"tracking.uri=sqlite:///{store}",
        *overrides,
    ]
    gigpo_lab = str(Path(sys.executable).parent / "gigpo-lab")
    with (tmp_path / "job.log").open("w") as log:
        return subprocess.Popen(
            [gigpo_lab, "train", *args], cwd=tmp_path, env=ENV, stdout=log, stderr=subprocess.STDOUT
        )


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        assert proc.poll() is None, f"the job exited (rc {proc.returncode}) while waiting for {what}"
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_status(store: Path) -> str | None:
    """The status of the store's one run, read directly (None before the run opens)."""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute("SELECT status FROM runs").fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def rank_one(proc: subprocess.Popen) -> int:
    """The pid of rank 1: the child that Lightning's launcher started from rank 0 (``proc``)."""
    kids = [int(k) for f in Path(f"/proc/{proc.pid}/task").glob("*/children") for k in f.read_text().split()]
    assert len(kids) == 1, kids
    return kids[0]


def ended(pid: int) -> bool:
    """Whether the process ``pid`` (not a child of this one) has ended: gone, or a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, IndexError):
        return True


def the_run(store: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    return run


@pytest.fixture
def store(tmp_path, empty_mlflow_store) -> Path:
    path = tmp_path / "mlflow.db"
    shutil.copyfile(empty_mlflow_store, path)
    return path


def kill_rank_one_mid_rollout(tmp_path: Path, store: Path, *overrides: str) -> int:
    """Start a paced job, SIGKILL rank 1 once the run is open (rank 0 is then in its 8 s rollout, with no
    collective for longer than Lightning's watch period), wait for the job; rank 1's pid."""
    proc = start_job(tmp_path, store, *PACED, *overrides)
    try:
        wait_for(lambda: run_status(store) == "RUNNING", proc, "the run to open")
        pid = rank_one(proc)
        time.sleep(1)
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    return pid


def test_a_rank_that_raises_under_ddp_ends_the_run_failed_with_its_rank_and_error(tmp_path, store):
    """Rank 1 collects seeds 2 and 3 in the first iteration (rank 0: 0 and 1); their env fails at once, so
    rank 1 alone raises EnvFailure. Before, the run ended with rank 0's "Connection closed by peer" (or
    stayed RUNNING, when Lightning killed rank 0 first) and no rank."""
    faulty = [
        "env._target_=tests.tracking.faulty_env.make_faulty_env",
        "+env.fault=raise",
        "+env.fault_seeds=[2,3]",
    ]
    proc = start_job(tmp_path, store, "lightning=ddp", *faulty, "+env.step_delay_s=0.05")
    assert proc.wait(timeout=300) != 0
    run = the_run(store)
    assert run.info.status == "FAILED"
    assert run.data.tags["failed_rank"] == "1"
    assert run.data.tags["error"].startswith("rank 1: EnvFailure: 4 of 4 training trajectories failed")


def _assert_rank_one_killed(store, pid: int) -> None:
    """The run is FAILED, and names rank 1 (process ``pid``) and its SIGKILL."""
    run = the_run(store)
    assert run.info.status == "FAILED"
    assert run.data.tags["failed_rank"] == "1"
    assert run.data.tags["error"].startswith(f"rank 1 (pid {pid}) was killed by SIGKILL")


@pytest.mark.slow  # 25 s; the raising rank above covers the same path in the default suite
def test_a_rank_killed_under_ddp_ends_the_run_failed_with_its_rank_and_signal(tmp_path, store):
    """Before, Lightning's watcher on rank 0 killed every rank, rank 0 included, before rank 0 ended the run:
    it stayed RUNNING."""
    pid = kill_rank_one_mid_rollout(tmp_path, store, "lightning=ddp")
    _assert_rank_one_killed(store, pid)


@pytest.mark.slow
def test_a_rank_killed_under_fsdp_ends_the_run_failed_with_its_rank_and_signal(tmp_path, store):
    from hf_tiny import build_tiny_hf_model

    model = build_tiny_hf_model(tmp_path / "model")
    hf = ["lightning=fsdp", "model=hf", f"model.path={model}", "rollout.max_new_tokens=4"]
    pid = kill_rank_one_mid_rollout(tmp_path, store, *hf)
    _assert_rank_one_killed(store, pid)


@pytest.mark.slow
def test_rank_zero_killed_under_ddp_is_named_by_rank_one(tmp_path, store):
    """Rank 0, the only writer of the run, is killed: rank 1 (its child) fails at its next collective, sees
    that its parent is gone, and names rank 0. Before, nobody wrote the run: it stayed RUNNING."""
    proc = start_job(tmp_path, store, "lightning=ddp", *PACED)
    try:
        wait_for(lambda: run_status(store) == "RUNNING", proc, "the run to open")
        child = rank_one(proc)
        time.sleep(1)
        proc.kill()
        proc.wait(timeout=30)
        end = time.monotonic() + 120
        while not ended(child) and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert ended(child), "rank 1 outlived rank 0 by two minutes"
    run = the_run(store)
    assert run.info.status == "FAILED"
    assert run.data.tags["failed_rank"] == "0"
    assert run.data.tags["error"].startswith(
        f"rank 0 (pid {proc.pid}) ended without recording why (killed?); "
    )
    assert "rank 1 then failed: RuntimeError" in run.data.tags["error"]


@pytest.mark.slow
def test_a_rank_killed_under_an_external_launcher_is_named_by_the_surviving_rank(tmp_path, store):
    """srun or torchrun start every rank themselves (tests/ranks.py does the same): no Lightning watcher, so
    rank 0 meets the death at its next collective, finds rank 1's process of its host gone, and names it.
    Before, rank 0 wrote only its own "Connection closed by peer"."""
    from ranks import start_ranks

    keep = [o for o in TINY if not o.startswith(("trainer.iterations=", "trainer.eval_every="))]
    args = [
        *keep,
        "trainer.iterations=50",
        "trainer.eval_every=0",
        "lightning=ddp",
        *TWO_CPU_RANKS,
        *PACED,
        f"output_dir={tmp_path / 'out'}",
        f"tracking.uri=sqlite:///{store}",
    ]
    procs = start_ranks(
        args, tmp_path, 2, lambda rank: {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    )
    try:
        wait_for(lambda: run_status(store) == "RUNNING", procs[0], "the run to open")
        time.sleep(1)
        procs[1].kill()  # left unreaped until rank 0 is done: a zombie counts as gone
        assert procs[0].wait(timeout=120) != 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    run = the_run(store)
    assert run.info.status == "FAILED"
    assert run.data.tags["failed_rank"] == "1"
    error = run.data.tags["error"]
    assert error.startswith(
        f"rank 1 (pid {procs[1].pid}) ended without recording why (killed?); rank 0 then failed"
    )
