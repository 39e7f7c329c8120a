"""Every file in experiments/ and sweeps/ composes, and each experiment smoke-runs one tiny job through multirun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config, config_root
from tests.conftest import TINY

EXPERIMENTS = sorted(p.stem for p in (config_root() / "experiments").glob("*.yaml"))
SWEEPS = sorted(p.stem for p in (config_root() / "sweeps").glob("*.yaml"))
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name):
    cfg = compose_config([f"experiments={name}"], return_hydra_config=True)
    assert cfg.hydra.runtime.choices["experiments"] == name


@pytest.mark.parametrize("name", SWEEPS)
def test_every_sweep_composes_as_a_multirun(name):
    cfg = compose_config([f"sweeps={name}"], return_hydra_config=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.hydra.sweeper.params and "seed" in cfg.hydra.sweeper.params


def test_step_weight_sweep_is_the_papers_grid():
    cfg = compose_config(["sweeps=step_weight"], return_hydra_config=True)
    grid = [float(x) for x in cfg.hydra.sweeper.params["estimator.step_advantage_weight"].split(",")]
    assert grid == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4]
    assert cfg.estimator._target_.endswith("GiGPO")


def test_estimator_sweep_covers_every_registered_estimator():
    from gigpo_lab.algorithm import available_estimators

    cfg = compose_config(["sweeps=estimators"], return_hydra_config=True)
    assert sorted(cfg.hydra.sweeper.params["estimator"].split(",")) == sorted(available_estimators())


def _single_job_overrides(group: str, name: str) -> list[str]:
    """Pin every swept key to its first value, so the file runs as a one-job multirun."""
    cfg = compose_config([f"{group}={name}"], return_hydra_config=True)
    params = cfg.hydra.sweeper.get("params") or {}
    return [f"{k}={str(v).split(',')[0]}" for k, v in params.items()]


def _smoke(group: str, name: str, tmp_path: Path) -> None:
    args = [str(BIN / "gigpo-lab"), "train", f"{group}={name}", *TINY, "hydra.launcher.n_jobs=1"]
    args += _single_job_overrides(group, name)
    out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 1 and children[0].info.status == "FINISHED"
    assert children[0].data.tags["mlflow.parentRunId"] in {r.info.run_id for r in runs}


def test_the_main_experiment_smoke_runs_through_multirun(tmp_path):
    _smoke("experiments", "gigpo_vs_grpo", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("group", "name"), [("experiments", n) for n in EXPERIMENTS] + [("sweeps", n) for n in SWEEPS]
)
def test_every_experiment_and_sweep_smoke_runs(group, name, tmp_path):
    cfg = compose_config([f"{group}={name}"], return_hydra_config=True)
    if str(cfg.hydra.mode) != "RunMode.MULTIRUN":
        pytest.skip(f"{group}={name} is a building block of other experiments, not a multirun")
    _smoke(group, name, tmp_path)
