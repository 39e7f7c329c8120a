"""Two-process data parallelism on the CPU (gloo): gradients are synchronised (both ranks end with identical
weights, which differ from the start) and the rollouts are split (each rank collects its own env groups).

The module is driven by Lightning's ``ddp_spawn`` here (the ranks are spawned inside pytest and report back
through files); ``trainer=ddp`` itself (Lightning relaunching the command per rank) runs end to end in the slow
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
from gigpo_lab.train import _build_module

ROOT = Path(__file__).resolve().parents[1]


class RecordingCollector:
    """The run's collector, remembering the seeds of every ``collect`` call."""

    def __init__(self, inner):
        self.inner, self.seeds = inner, []

    def collect(self, seeds, generator):
        self.seeds.append([int(s) for s in seeds])
        return self.inner.collect(seeds, generator)

    def evaluate(self, *args, **kwargs):
        return self.inner.evaluate(*args, **kwargs)


class DumpPerRank(L.Callback):
    """Each rank writes its policy weights and collected seeds to ``folder/rank{r}.pt`` after training."""

    def __init__(self, folder: Path):
        self.folder = folder

    def on_train_epoch_end(self, trainer, pl_module):
        pl_module.finish_iteration()  # what IterationLogger does: sync the engine, queue metrics
        pl_module.pending_metrics.clear()
        pl_module.pending_samples.clear()

    def on_train_end(self, trainer, pl_module):
        state = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}
        payload = {"state": state, "seeds": pl_module.collector.seeds, "world": trainer.world_size}
        torch.save(payload, self.folder / f"rank{trainer.global_rank}.pt")


def test_two_ranks_sync_gradients_and_split_rollouts(tiny_overrides, tmp_path):
    cfg = compose_config(
        [
            *tiny_overrides,
            "env=sokoban",  # -0.1 a valid step: advantages are not all zero even before any success
            "env.max_turns=6",
            "rollout.group_size=4",
            "trainer.minibatch_size=0",  # the same number of optimizer steps on both ranks
            "trainer.eval_every=0",
        ]
    )
    module = _build_module(cfg)
    module.collector = RecordingCollector(module.collector)
    initial = {k: v.clone() for k, v in module.policy.state_dict().items()}
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        callbacks=[DumpPerRank(tmp_path)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
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


@pytest.fixture(scope="module")
def ddp_cli_run(tmp_path_factory):
    """``gigpo-lab train trainer=ddp`` on 2 CPU processes: Lightning relaunches the command for rank 1."""
    tmp_path = tmp_path_factory.mktemp("ddp_cli")
    overrides = [
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.precision=32-true",
        *TINY,
        f"output_dir={tmp_path / 'out'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "gigpo_lab.train", *overrides],
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
    assert "Starting with 2 processes" in run.stdout + run.stderr
    assert (tmp_path / "out" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="known gap: train() opens an MLflow run on every rank (Lightning relaunches the whole command); "
    "only rank 0 should track",
)
def test_a_ddp_job_is_one_mlflow_run(ddp_cli_run):
    from mlflow.tracking import MlflowClient

    tmp_path, run = ddp_cli_run
    assert run.returncode == 0, run.stderr[-4000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("gigpo-lab")
    assert len(client.search_runs([experiment.experiment_id])) == 1


@pytest.mark.parametrize("trainer", ["gpu", "ddp", "fsdp"])
def test_scale_out_trainer_configs_compose(trainer):
    from gigpo_lab.train import _strategy

    cfg = compose_config([f"trainer={trainer}"])
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.iterations == compose_config().trainer.iterations, "the CPU loop's keys are inherited"
    strategy = _strategy(cfg.trainer.strategy)
    expected = {"gpu": "auto", "ddp": "ddp"}.get(trainer)
    if expected is not None:
        assert strategy == expected
    else:
        from lightning.pytorch.strategies import FSDPStrategy

        assert isinstance(strategy, FSDPStrategy)


def test_slurm_launcher_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the `slurm` extra is not installed")
    cfg = compose_config(["hydra/launcher=slurm", "trainer=ddp"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.timeout_min, launcher.gpus_per_node, launcher.tasks_per_node) == (240, 1, 1)
    assert list(launcher.setup) == [f"export OMP_NUM_THREADS={launcher.cpus_per_task}"]


def test_row_sized_minibatches_are_refused_with_several_ranks(tiny_overrides, tmp_path):
    """Ranks collect different row counts: row-sized minibatches would give them different step counts."""
    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=4", "trainer.eval_every=0"])
    module = _build_module(cfg)
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(Exception, match="trainer.minibatch_size=0"):
        trainer.fit(module)
