"""Sweeps as real processes: no parent run is ever left RUNNING, even when the launcher cannot start."""

from __future__ import annotations

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
