"""Faults injected for real, each through ``train(cfg)`` or the piece that meets it (docs/FAULTS.md lists them).

Envs that fail are real envs (FrozenLake through ``make_env``) wrapped by ``FaultyEnv``, which raises or
returns a NaN/inf reward on the first step of episodes reset with chosen seeds. With the TINY sizes
(B=2 groups x G=2 envs, run seed 0) iteration ``it`` resets its groups with seeds ``2*it`` and ``2*it + 1``,
so ``fault_seeds=[2]`` hits both trajectories of group 0 in iteration 1 (2 of 4 trajectories) and nothing
in iteration 0 or in evaluation (seeds from 1e9). The slow faults (SIGKILL, a dying MLflow server, a
multirun with a crashing job) are in ``test_faults_slow.py``.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
from functools import partial
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from tiny_sizes import MOVES_AT_ONCE

from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.rollout import build_torch_engine
from gigpo_lab.rollout.collector import Collector, EnvFailure
from gigpo_lab.tracking.buffer import BufferedRun
from gigpo_lab.tracking.import_metrics import import_file
from gigpo_lab.tracking.mlflow_tracker import MlflowTracker
from gigpo_lab.train import train
from tests.tracking.faulty_env import CRASH, make_faulty_env


def faulty(fault: str, seeds: str = "[2]") -> list[str]:
    return [
        "env._target_=tests.tracking.faulty_env.make_faulty_env",
        f"+env.fault={fault}",
        f"+env.fault_seeds={seeds}",
    ]


def _run(uri: str):
    """The store's latest run."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("gigpo-lab")
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]


def _steps(client, run, key):
    return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]


def _finite_weights(ckpt: Path) -> bool:
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    return all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point())


# ----------------------------------------------------------------------------- an env raises in step
def test_env_error_drops_the_trajectory_and_the_run_goes_on(tiny_overrides):
    cfg = compose_config([*tiny_overrides, *faulty("raise"), "rollout.max_env_error_rate=0.5"])
    metrics = train(cfg)
    client, run = _run(cfg.tracking.uri)
    assert run.info.status == "FINISHED"
    assert _steps(client, run, "rollout/env_errors") == [(0, 0.0), (1, 2.0)]
    assert metrics["rollout/env_errors"] == 2.0
    assert [s for s, _ in _steps(client, run, "train/loss")] == [0, 1]  # iteration 1 trained on group 1


def test_collector_drops_the_failed_trajectories_rows_and_rebuilds_their_envs():
    env_fn = partial(make_faulty_env, "raise", [2], id="gigpo_lab/FrozenLake-v0", max_turns=4)
    policy = build_tiny_policy(vocabulary=env_fn().unwrapped.vocabulary())
    collector = Collector(
        env_fn, policy, build_torch_engine(policy), groups=2, group_size=2, max_env_error_rate=0.5
    )
    before = list(collector.envs)
    batch, metrics = collector.collect([2, 3], torch.Generator().manual_seed(0))
    assert metrics["rollout/env_errors"] == 2.0
    assert set(batch.traj_ids.tolist()) == {2, 3}  # group 0 (seed 2) dropped, group 1 kept whole
    assert set(batch.group_ids.tolist()) == {1}
    assert batch.extras["env_failed"].tolist() == [True, True, False, False]
    assert collector.envs[0] is not before[0] and collector.envs[2] is before[2]


def test_env_errors_above_the_rate_stop_the_run_with_the_envs_traceback(tiny_overrides, tmp_path):
    cfg = compose_config([*tiny_overrides, *faulty("raise"), "rollout.max_env_error_rate=0.25"])
    with pytest.raises(EnvFailure) as err:
        train(cfg)
    message = str(err.value)
    assert "2 of 4 training trajectories failed" in message and "max_env_error_rate=0.25" in message
    assert "reset seed 2" in message and "step 0" in message and "frozenlake" in message
    assert "Traceback" in message and f"RuntimeError: {CRASH}" in message
    assert isinstance(err.value.__cause__, RuntimeError)  # chained: the env's own traceback is printed
    _, run = _run(cfg.tracking.uri)
    assert run.info.status == "FAILED" and CRASH in run.data.tags["error"]
    assert (tmp_path / "out" / "checkpoints" / "iter0000.ckpt").is_file()  # iteration 0's checkpoint kept


# ----------------------------------------------------------------------------- non-finite rewards and loss
@pytest.mark.parametrize("fault", ["nan", "inf"])
def test_non_finite_reward_names_env_seed_and_step_and_keeps_the_checkpoint(fault, tiny_overrides, tmp_path):
    cfg = compose_config([*tiny_overrides, *faulty(f"{fault}_reward")])
    with pytest.raises(FloatingPointError) as err:
        train(cfg)
    message = str(err.value)
    assert "env frozenlake (gigpo_lab/FrozenLake-v0)" in message
    assert f"returned reward {float(fault)}" in message
    assert "at step 0 of the episode reset with seed 2" in message
    _, run = _run(cfg.tracking.uri)
    assert run.info.status == "FAILED"
    ckpts = tmp_path / "out" / "checkpoints"
    assert (ckpts / "iter0000.ckpt").is_file() and _finite_weights(ckpts / "iter0000.ckpt")
    assert not (ckpts / "iter0001.ckpt").exists()


def test_nan_loss_names_iteration_and_minibatch_and_keeps_the_checkpoint_before(tiny_overrides, tmp_path):
    # lr 1e30: iteration 0's one update blows the weights up (still finite); iteration 1's loss is NaN. That
    # needs a gradient in iteration 0 (MOVES_AT_ONCE)
    cfg = compose_config(
        [
            *tiny_overrides,
            "trainer.optimizer.lr=1e30",
            "loss.kl_coef=0.0",
            "trainer.ppo_epochs=1",
            MOVES_AT_ONCE,
        ]
    )
    with pytest.raises(FloatingPointError, match=r"the loss is nan at iteration 1, minibatch 0"):
        train(cfg)
    _, run = _run(cfg.tracking.uri)
    assert run.info.status == "FAILED" and "the loss is nan" in run.data.tags["error"]
    ckpts = tmp_path / "out" / "checkpoints"
    assert _finite_weights(ckpts / "iter0000.ckpt")
    assert (ckpts / "on_exception.ckpt").is_file()


# ----------------------------------------------------------------------------- the store at start
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_at_start_fails_fast_before_any_rollout(tiny_overrides, tmp_path):
    uri = f"http://127.0.0.1:{_closed_port()}"
    cfg = compose_config([*tiny_overrides, f"tracking.uri={uri}"])
    with pytest.raises(RuntimeError, match=r"the MLflow store 'http://127\.0\.0\.1:\d+' cannot be reached"):
        train(cfg)
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_the_start_check_tries_a_broken_server_once_not_with_retries(tiny_overrides, tmp_path):
    """MLflow's default client retries a failing request with backoff for minutes; the start check must not.
    A server that accepts each connection and hangs up counts how often it is tried."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.5)
    tries, done = [], threading.Event()

    def serve():
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            tries.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    cfg = compose_config([*tiny_overrides, f"tracking.uri=http://127.0.0.1:{server.getsockname()[1]}"])
    try:
        with pytest.raises(RuntimeError, match="cannot be reached"):
            train(cfg)
    finally:
        done.set()
        thread.join()
        server.close()
    assert len(tries) == 1


def test_sqlite_store_in_an_unwritable_place_fails_before_any_rollout(tiny_overrides, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    cfg = compose_config([*tiny_overrides, f"tracking.uri=sqlite:///{blocker}/sub/mlflow.db"])
    with pytest.raises(RuntimeError, match="cannot be reached"):
        train(cfg)
    assert not (tmp_path / "out" / "checkpoints").exists()


# ----------------------------------------------------------------------------- the output folder at start
def test_output_dir_under_a_regular_file_is_a_clear_error(tiny_overrides, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    cfg = compose_config([*tiny_overrides, f"output_dir={blocker}/run"])
    with pytest.raises(
        OSError, match=r"the output directory .*a_file/run is not writable \(Not a directory\)"
    ):
        train(cfg)
    assert MlflowClient(tracking_uri=cfg.tracking.uri).get_experiment_by_name("gigpo-lab") is None  # no run


@pytest.fixture
def tiny_mount(tmp_path):
    """A 64 KiB tmpfs (root only): a real disk that fills up. Skipped where mounting is not allowed."""
    point = tmp_path / "small_disk"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def test_full_disk_output_dir_is_a_clear_error(tiny_overrides, tiny_mount):
    with pytest.raises(OSError):
        (tiny_mount / "filler").write_bytes(b"x" * 128 * 1024)  # fill it up
    cfg = compose_config([*tiny_overrides, f"output_dir={tiny_mount}/run"])
    with pytest.raises(OSError, match=r"is not writable \(No space left on device\)"):
        train(cfg)


def test_disk_full_mid_run_is_a_clear_error_and_leaves_only_whole_checkpoints(tiny_overrides, tmp_path):
    """The output folder's disk holds iteration 0's two checkpoint files and fills up at iteration 1's."""
    probe = tmp_path / "probe"
    train(compose_config([*tiny_overrides, f"output_dir={probe}", "trainer.iterations=1"]))
    size = (probe / "checkpoints" / "last.ckpt").stat().st_size
    point = tmp_path / "small_disk"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={int(size * 2.5) // 1024}k", "tmpfs", str(point)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        cfg = compose_config([*tiny_overrides, f"output_dir={point}/run", "trainer.iterations=3"])
        with pytest.raises(
            OSError, match=r"cannot write the checkpoint .*iter0001.ckpt \(No space left on device\)"
        ):
            train(cfg)
        ckpts = point / "run" / "checkpoints"
        assert sorted(p.name for p in ckpts.iterdir()) == ["iter0000.ckpt", "last.ckpt"]  # no partial file
        assert _finite_weights(ckpts / "last.ckpt")  # whole: it loads
        _, run = _run(cfg.tracking.uri)
        assert run.info.status == "FAILED" and "No space left on device" in run.data.tags["error"]
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


# ----------------------------------------------------------------------------- the store goes away mid-run
def test_writes_are_buffered_while_the_store_is_away_and_flushed_when_it_returns(
    tmp_path, empty_mlflow_store
):
    """A real sqlite store becomes unreachable (its folder is replaced by a file) and comes back."""
    db_dir = tmp_path / "store"
    db_dir.mkdir()
    shutil.copyfile(empty_mlflow_store, db_dir / "mlflow.db")
    uri = f"sqlite:///{db_dir / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "faults")
    tracker.check_reachable()
    tracker.start()
    run = BufferedRun(tracker, tmp_path)
    run.log_metrics({"a": 0.0}, step=0)
    tracker._client = None  # a fresh client (and engine) per outage, as a new process would have
    away = tmp_path / "store_away"
    db_dir.rename(away)
    db_dir.write_text("the store's folder is gone")  # not even re-creatable
    run.log_metrics({"a": 1.0}, step=1)
    run.log_text("sample\n", "samples/iteration_00001.jsonl")
    assert run.unsent == 2 and run.fallback.is_file()
    db_dir.unlink()
    away.rename(db_dir)
    tracker._client = None
    run.log_metrics({"a": 2.0}, step=2)  # sends what waits first, in order
    assert run.unsent == 0 and not run.fallback.exists()
    assert run.end("FINISHED")
    client = MlflowClient(tracking_uri=uri)
    assert [(m.step, m.value) for m in client.get_metric_history(run.run_id, "a")] == [
        (0, 0.0),
        (1, 1.0),
        (2, 2.0),
    ]
    assert client.get_run(run.run_id).info.status == "FINISHED"


def test_import_metrics_sends_a_fallback_file_once(tmp_path, empty_mlflow_store):
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "faults")
    tracker.check_reachable()
    tracker.start()
    tracker.log_metrics({"a": 0.0}, step=0)
    fallback = tmp_path / "mlflow_unsent.jsonl"
    lines = [
        {"kind": "metrics", "step": 0, "timestamp_ms": 1, "metrics": {"a": 0.0}},  # already in the store
        {"kind": "metrics", "step": 1, "timestamp_ms": 2, "metrics": {"a": 1.0, "b": math.nan}},
        {"kind": "tags", "tags": {"wall_s": "1.0"}},
        {"kind": "end", "status": "FINISHED"},
    ]
    fallback.write_text(
        "".join(json.dumps({"uri": uri, "run_id": tracker.run_id, **r}) + "\n" for r in lines)
    )
    counts = import_file(fallback)
    assert counts["metric_points"] == 2 and counts["metric_points_present"] == 1
    again = import_file(fallback)
    assert again["metric_points"] == 0 and again["metric_points_present"] == 3
    client = MlflowClient(tracking_uri=uri)
    assert sorted(m.step for m in client.get_metric_history(tracker.run_id, "a")) == [0, 1]
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["wall_s"] == "1.0"


def test_a_non_finite_gradient_with_a_finite_loss_stops_before_the_step(tiny_overrides, tmp_path):
    """A backward pass that yields a NaN gradient while the loss is finite (seen on the H200: a 0.5 B model in
    bf16-mixed, experiments/results/gpu/README.md): the run stops at that iteration, before the optimizer
    writes NaN into the weights, instead of one iteration later on a NaN loss, and the error names the parameter
    (training/grad_guard.py). A hook on one weight makes its gradient NaN, in a real Trainer fit."""
    import lightning as L

    from gigpo_lab.train import build

    cfg = compose_config([*tiny_overrides, MOVES_AT_ONCE])
    module = build(cfg)
    name, weight = next((n, p) for n, p in module.policy.named_parameters() if p.requires_grad)
    weight.register_hook(lambda g: torch.full_like(g, float("nan")))
    before = [p.detach().clone() for p in module.policy.parameters()]
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(
        FloatingPointError, match=r"the gradient norm is nan at iteration 0 with a finite loss"
    ) as err:
        trainer.fit(module)
    assert f"the first non-finite gradient of the backward pass is {name}'s (in backward call 1 " in str(
        err.value
    )
    after = list(module.policy.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))  # no step was taken
