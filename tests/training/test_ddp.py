"""Two-process data parallelism on the CPU (gloo): gradients are synchronised (both ranks end with identical
weights, which differ from the start), the rollouts are split (each rank collects its own env groups with
its own sampling stream), the logged rollout metrics describe the whole job, the held-out evaluation is
shared (each rank plays its share; both log what one process logs), and only rank 0 tracks.

The module is driven by Lightning's ``ddp_spawn`` here (the ranks are spawned inside pytest and report back
through files); ``lightning=ddp`` itself (Lightning relaunching the command per rank) runs end to end in the slow
CLI test at the bottom.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from tiny_sizes import TINY

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import build
from gigpo_lab.training.seeds import EVAL_SEED_BASE

ROOT = Path(__file__).resolve().parents[2]


def two_rank_trainer(folder: Path, iterations: int, *callbacks: L.Callback) -> L.Trainer:
    """A bare Lightning Trainer over 2 CPU processes (ddp_spawn, gloo): no logger, checkpoints or bars."""
    return L.Trainer(
        max_epochs=iterations,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        callbacks=list(callbacks),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(folder),
    )


class RecordingCollector:
    """The run's collector, remembering the seeds of every ``collect`` and ``held_out`` call."""

    def __init__(self, inner):
        self.inner, self.seeds, self.rollouts, self.held_out_seeds = inner, [], [], []

    def collect(self, seeds, generator):
        self.seeds.append([int(s) for s in seeds])
        batch, rollout = self.inner.collect(seeds, generator)
        self.rollouts.append(dict(rollout))  # this rank's own metrics, before the module reduces them
        return batch, rollout

    def held_out(self, seeds, *args, **kwargs):
        self.held_out_seeds.append([int(s) for s in seeds])
        return self.inner.held_out(seeds, *args, **kwargs)


class DumpPerRank(L.Callback):
    """Each rank writes its policy weights and collected seeds to ``folder/rank{r}.pt`` after training."""

    def __init__(self, folder: Path):
        self.folder, self.logged, self.evaluations = folder, [], []

    def on_train_epoch_end(self, trainer, pl_module):
        # what IterationLogger does: read what the module queued when it ended the iteration
        self.logged.extend(m for _, m in pl_module.pending_metrics if "rollout/env_steps" in m)
        self.evaluations.extend(m for _, m in pl_module.pending_metrics if "eval/success_rate" in m)
        pl_module.pending_metrics.clear()
        pl_module.pending_samples.clear()

    def on_train_end(self, trainer, pl_module):
        state = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}
        payload = {
            "state": state,
            "seeds": pl_module.collector.seeds,
            "world": trainer.world_size,
            "local": pl_module.collector.rollouts,
            "logged": self.logged,
            "evaluations": self.evaluations,
            "held_out_seeds": pl_module.collector.held_out_seeds,
        }
        torch.save(payload, self.folder / f"rank{trainer.global_rank}.pt")


def test_two_ranks_sync_gradients_split_rollouts_and_share_the_evaluation(tiny_overrides, tmp_path):
    cfg = compose_config(
        [
            *tiny_overrides,
            # holes right of and below the start: a valid move that goes anywhere ends the episode, so the
            # ranks' env-step counts differ (and a sum, a mean and a weighted mean can be told apart), and so
            # do the lengths of the held-out episodes
            "env.desc=[SH,HG]",
            "env.max_turns=12",
            "rollout.group_size=4",
            "trainer.minibatch_size=0",  # the same number of optimizer steps on both ranks
            "trainer.eval_every=2",  # before the first update and after the last
            "rollout.eval_episodes=9",  # 5 on rank 0, 4 on rank 1
            "rollout.eval_greedy_episodes=1",  # 1 on rank 0, none on rank 1
            "rollout.eval_temperature=1.0",
        ]
    )
    alone = build(cfg).evaluate()  # no Trainer: one process plays every held-out episode
    module = build(cfg)
    module.collector = RecordingCollector(module.collector)
    initial = {k: v.clone() for k, v in module.policy.state_dict().items()}
    trainer = two_rank_trainer(tmp_path, 2, DumpPerRank(tmp_path))
    L.seed_everything(0, verbose=False)
    trainer.fit(module)

    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert rank0["world"] == rank1["world"] == 2
    for key, value in rank0["state"].items():
        torch.testing.assert_close(rank1["state"][key], value, rtol=0, atol=0, msg=key)
    assert any(not torch.equal(initial[k], rank0["state"][k]) for k in initial), "the weights moved"
    # iteration it, rank r collects seeds seed*1e7 + (it*2 + r)*B + b: disjoint across ranks and iterations
    groups = cfg.rollout.groups
    for it in range(2):
        for rank, dump in ((0, rank0), (1, rank1)):
            first = (it * 2 + rank) * groups
            assert dump["seeds"][it] == [first + b for b in range(groups)]
    all_seeds = [s for d in (rank0, rank1) for it in d["seeds"] for s in it]
    assert len(all_seeds) == len(set(all_seeds))

    # the logged rollout metrics describe the job: counts summed over the ranks, episode rates averaged,
    # the invalid rate weighted by each rank's env steps; both ranks hold the same job-wide rollout values
    # (adv/*, train/* and time/* stay each rank's own)
    total = 0.0
    for it in range(2):
        a, b = rank0["local"][it], rank1["local"][it]
        job = [{k: v for k, v in d["logged"][it].items() if k.startswith("rollout/")} for d in (rank0, rank1)]
        assert job[0] == job[1]
        logged = rank0["logged"][it]
        steps = a["rollout/env_steps"] + b["rollout/env_steps"]
        total += steps
        assert logged["rollout/env_steps"] == steps
        assert logged["rollout/tokens"] == a["rollout/tokens"] + b["rollout/tokens"]
        assert logged["rollout/episodes"] == a["rollout/episodes"] + b["rollout/episodes"]
        assert logged["rollout/env_steps_total"] == total
        for key in ("rollout/success_rate", "rollout/return", "rollout/length"):
            assert logged[key] == pytest.approx((a[key] + b[key]) / 2, rel=1e-12), key
        weighted = (
            a["rollout/invalid_rate"] * a["rollout/env_steps"]
            + b["rollout/invalid_rate"] * b["rollout/env_steps"]
        )
        assert logged["rollout/invalid_rate"] == pytest.approx(weighted / steps, rel=1e-12)
    assert any(
        rank0["local"][it]["rollout/env_steps"] != rank1["local"][it]["rollout/env_steps"] for it in range(2)
    ), "on one fixed map the ranks' rollouts differ only by their sampling streams: they must not be copies"

    # the evaluation is shared: each rank plays every other held-out episode, and both log the whole of it,
    # before any update exactly what one process logs with the same weights
    for rank, dump in ((0, rank0), (1, rank1)):
        share = [[EVAL_SEED_BASE + i for i in range(rank, n, 2)] for n in (9, 1)]  # sampled, greedy
        assert dump["held_out_seeds"] == share * 2, rank  # at both evaluations
    clockless = [
        [{k: v for k, v in e.items() if k != "time/eval_s"} for e in d["evaluations"]] for d in (rank0, rank1)
    ]
    assert len(clockless[0]) == 2 and clockless[0] == clockless[1]
    assert clockless[0][0] == {k: v for k, v in alone.items() if k != "time/eval_s"}
    assert clockless[0][0]["eval/length"] not in (1.0, 12.0), "held-out episodes of different lengths"


@pytest.fixture(scope="module")
def ddp_cli_run(tmp_path_factory):
    """``gigpo-lab train lightning=ddp`` on 2 CPU processes, through the console script as the README types it:
    Lightning relaunches the command line for rank 1, which must enter through the same ``train`` sub-command."""
    tmp_path = tmp_path_factory.mktemp("ddp_cli")
    overrides = [
        "lightning=ddp",
        "lightning.accelerator=cpu",
        "lightning.devices=2",
        "lightning.precision=32-true",
        *TINY,
        "env=sokoban",  # episodes end only when solved: every one lasts env.max_turns=4 steps here
        f"output_dir={tmp_path / 'out'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "gigpo-lab"), "train", *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return tmp_path, run


@pytest.mark.slow
def test_trainer_ddp_from_the_command_line(ddp_cli_run):
    tmp_path, run = ddp_cli_run
    assert run.returncode == 0, run.stderr[-4000:]
    logs = "".join(f.read_text() for f in tmp_path.glob("outputs/*/*/*.log"))  # the job's full log
    assert "Starting with 2 processes" in logs
    assert run.stderr.count("gigpo-lab train: ") == 1, "rank 0 alone prints the header"
    assert run.stderr.count("run finished") == 1, "and the summary"
    assert (tmp_path / "out" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_a_ddp_job_is_one_mlflow_run(ddp_cli_run):
    """Only global rank 0 tracks; its env-step total counts both ranks' env steps."""
    from mlflow.tracking import MlflowClient

    tmp_path, run = ddp_cli_run
    assert run.returncode == 0, run.stderr[-4000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("gigpo-lab")
    (only,) = client.search_runs([experiment.experiment_id])
    assert only.info.status == "FINISHED"
    steps = client.get_metric_history(only.info.run_id, "rollout/env_steps")
    totals = client.get_metric_history(only.info.run_id, "rollout/env_steps_total")
    # every iteration: 2 ranks x 2 groups x 2 envs x 4 steps; one rank alone would log half of it
    assert [m.value for m in sorted(steps, key=lambda m: m.step)] == [2 * 2 * 2 * 4] * 2
    assert totals[-1].value == 2 * 2 * 2 * 2 * 4


@pytest.mark.parametrize(
    ("environ", "zero"),
    [
        ({}, True),  # a plain single process
        ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),  # Lightning's rank 0
        ({"LOCAL_RANK": "1", "NODE_RANK": "0"}, False),  # Lightning's relaunched rank 1
        ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),  # rank 0 of the second node is not global rank 0
        ({"RANK": "3", "LOCAL_RANK": "1"}, False),  # torchrun
        ({"SLURM_PROCID": "0"}, True),  # one SLURM task
        ({"SLURM_PROCID": "2"}, False),  # a third SLURM task
        ({"RANK": ""}, True),  # set but empty counts as unset
        ({"OMPI_COMM_WORLD_RANK": "1"}, False),  # Open MPI's mpirun
        ({"PMI_RANK": "1"}, False),  # MPICH / Intel MPI
        ({"PMIX_RANK": "0", "OMPI_COMM_WORLD_RANK": "0"}, True),
    ],
)
def test_only_the_launchs_rank_zero_tracks(environ, zero):
    from gigpo_lab.training.distributed import is_launch_rank_zero

    assert is_launch_rank_zero(environ) is zero


@pytest.mark.parametrize("option", ["gpu", "ddp"])
def test_scale_out_lightning_configs_compose(option):
    from hydra.utils import instantiate

    cfg = compose_config([f"lightning={option}"])
    assert cfg.lightning.accelerator == "gpu" and cfg.lightning.precision == "bf16-mixed"
    assert cfg.trainer.iterations == compose_config().trainer.iterations, "the loop's keys are untouched"
    assert cfg.trainer.minibatch_size == {"gpu": 128, "ddp": 0}[option], "ddp: one step per PPO epoch"
    assert instantiate(cfg.lightning).trainer_args["strategy"] == {"gpu": "auto", "ddp": "ddp"}[option]


def test_slurm_launcher_composes():
    cfg = compose_config(["hydra/launcher=slurm", "lightning=ddp"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.timeout_min, launcher.gpus_per_node, launcher.tasks_per_node) == (240, 1, 1)
    assert list(launcher.setup) == [f"export OMP_NUM_THREADS={launcher.cpus_per_task}"]


@pytest.mark.parametrize(
    "selection",
    [
        "sweeps=step_weight",
        "sweeps=estimators",
        "experiments=gigpo_vs_grpo",
        "experiments=step_weight_ablation",
    ],
)
def test_a_sweep_file_runs_locally_or_on_slurm(selection):
    """The sweep files pick the local joblib launcher; a hydra/launcher=slurm after them replaces it, grid kept."""
    local = compose_config([selection], return_hydra_config=True).hydra
    assert local.launcher._target_.endswith("JoblibLauncher") and local.launcher.n_jobs == -1
    slurm = compose_config([selection, "hydra/launcher=slurm"], return_hydra_config=True).hydra
    assert slurm.launcher._target_.endswith("SlurmLauncher") and "n_jobs" not in slurm.launcher
    assert slurm.sweeper.params == local.sweeper.params and len(slurm.sweeper.params) >= 2


@pytest.mark.parametrize(
    "selection", ["sweeps=step_weight", "sweeps=estimators", "experiments=gigpo_vs_grpo"]
)
def test_sweep_jobs_take_one_thread_locally_and_their_cores_on_slurm(selection, monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert compose_config([selection]).lightning.num_threads == 1
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")  # what sbatch --cpus-per-task=8 sets inside the job
    assert compose_config([selection]).lightning.num_threads == 8


@pytest.mark.slow  # 13 s: two spawned ranks
def test_row_sized_minibatches_are_refused_with_several_ranks(tiny_overrides, tmp_path):
    """Ranks collect different row counts: row-sized minibatches would give them different step counts."""
    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=4", "trainer.eval_every=0"])
    module = build(cfg)
    trainer = two_rank_trainer(tmp_path, 1)
    with pytest.raises(Exception, match="trainer.minibatch_size=0"):
        trainer.fit(module)


@pytest.mark.slow  # 14 s: two spawned ranks
def test_packed_chunks_are_refused_with_several_ranks(tiny_overrides, tmp_path):
    """Packed chunks are bounded by tokens, so ranks would run different numbers of backward passes: an explicit
    trainer.shared_prefix=true is refused (null, the default, turns packing off there)."""
    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=0", "trainer.shared_prefix=true"])
    module = build(cfg)
    trainer = two_rank_trainer(tmp_path, 1)
    with pytest.raises(Exception, match="trainer.shared_prefix=false"):
        trainer.fit(module)


def test_a_stale_rank_variable_in_a_single_process_is_a_clear_error(tiny_overrides, tmp_path, monkeypatch):
    """LOCAL_RANK=1 left in the shell: the run would go untracked; it stops before any rollout, naming it."""
    from gigpo_lab.train import train

    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(
        RuntimeError, match=r"global rank 0 of 1.*'LOCAL_RANK': '1'.*unset the stale variables"
    ):
        train(compose_config(tiny_overrides))
    assert not (tmp_path / "out" / "checkpoints").exists(), "it stopped before training"


@pytest.mark.slow  # 27 s; DDP's rank-zero tracking stays covered by the console-script DDP run
def test_under_ddp_spawn_only_rank_zero_writes_the_run(tiny_overrides, tmp_path):
    """With ddp_spawn the callbacks (and the run's writer) are copied into every worker: rank 0 alone writes."""
    from mlflow.tracking import MlflowClient

    from gigpo_lab.tracking import MlflowTracker
    from gigpo_lab.tracking.callback import IterationLogger

    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=0"])
    tracker = MlflowTracker(cfg.tracking.uri, "spawned")
    tracker.start()
    trainer = two_rank_trainer(tmp_path, 2, IterationLogger(tracker))
    trainer.fit(build(cfg))
    tracker.end()
    steps = MlflowClient(tracking_uri=cfg.tracking.uri).get_metric_history(
        tracker.run_id, "rollout/env_steps"
    )
    assert sorted(m.step for m in steps) == [0, 1], "one point per iteration, not one per rank"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lightning.strategy=fsdp", r"is not the lab's sharding: use lightning=fsdp"),  # Lightning's FSDP1
        ("lightning.strategy=ddp_spawn", "runs the iterations in worker processes.*use lightning=ddp"),
    ],
)
def test_strategies_the_lab_cannot_run_are_refused_before_any_run_opens(
    override, message, tiny_overrides, tmp_path
):
    from mlflow.tracking import MlflowClient

    from gigpo_lab.errors import ConfigError
    from gigpo_lab.train import train

    cfg = compose_config([*tiny_overrides, override, "lightning.accelerator=cpu"])
    with pytest.raises(ConfigError, match=message):
        train(cfg)
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    assert client.get_experiment_by_name("gigpo-lab") is None, "refused before any run opens"
    assert not (tmp_path / "out").exists(), "and before any output folder is made"


def test_a_rank_other_than_zero_stops_at_once_when_the_store_is_unreachable(
    tiny_overrides, tmp_path, monkeypatch
):
    """Rank 0 would fail to open the run; rank 1 must not go on to wait for it at the process-group setup."""
    from ranks import free_port

    from gigpo_lab.train import train

    port = free_port()
    monkeypatch.setenv("LOCAL_RANK", "1")
    cfg = compose_config([*tiny_overrides, f"tracking.uri=http://127.0.0.1:{port}"])
    with pytest.raises(
        RuntimeError, match=rf"the MLflow store 'http://127\.0\.0\.1:{port}' cannot be reached"
    ):
        train(cfg)
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.slow
def test_ranks_started_together_on_a_new_sqlite_store_do_not_race_to_create_it(tiny_overrides, tmp_path):
    """srun or torchrun start every rank at once; before, each rank's store check created the new sqlite
    file's tables, and two creations at once failed ("duplicate column name"). Now only rank 0 creates it:
    2 ranks of lightning=ddp launched together on a store that does not exist both finish, as one run."""
    from mlflow.tracking import MlflowClient
    from ranks import start_ranks

    store = tmp_path / "new" / "mlflow.db"
    store.parent.mkdir()
    args = [
        *(o for o in tiny_overrides if not o.startswith("tracking.uri")),
        f"tracking.uri=sqlite:///{store}",
        "lightning=ddp",
        "lightning.accelerator=cpu",
        "lightning.devices=2",
        "lightning.precision=32-true",
        "trainer.iterations=1",
    ]
    procs = start_ranks(args, tmp_path, 2, lambda rank: {"stderr": subprocess.PIPE, "text": True})
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors[0][-2000:] + errors[1][-2000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    (only,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    assert only.info.status == "FINISHED"


def test_a_rank_other_than_zero_checks_a_new_sqlite_stores_folder_without_creating_it(tmp_path):
    from gigpo_lab.tracking import MlflowTracker

    store = tmp_path / "mlflow.db"
    MlflowTracker(f"sqlite:///{store}", "x").check_reachable(creates=False)
    assert not store.exists(), "rank 0 creates it"
    missing = tmp_path / "no_such_folder" / "mlflow.db"
    with pytest.raises(RuntimeError, match=r"cannot be reached \(no writable folder .*no_such_folder\)"):
        MlflowTracker(f"sqlite:///{missing}", "x").check_reachable(creates=False)
    MlflowTracker(f"sqlite:///{store}", "x").check_reachable()
    assert store.exists(), "rank 0 (creates=True) opens and creates it"
