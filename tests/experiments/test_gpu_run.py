"""experiments/gpu_run.sh, issue 49's one-command run on an air-gapped GPU node: its plumbing on a CPU. With no
budget left every part is skipped, counted as failed, and the summary is still written; the slow dry run
(GPU_CHECK_TINY=1, no wheels) runs the estimators and the default experiment and leaves only small files in
$OUT. gpu_check.sh's own dry run is tests/experiments/test_gpu_check.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_CHECK_TINY": "1", "WHEELS": "", "PY": sys.executable, "OUT": str(tmp_path / "out"),
           "WORK": str(tmp_path / "work"), "GPU_RUN_COMMIT": "test", **env}  # fmt: skip
    return subprocess.run(
        ["bash", "experiments/gpu_run.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


def test_with_no_budget_left_every_part_is_skipped_and_the_summary_is_written(tmp_path):
    proc = _run(tmp_path, GPU_RUN_BUDGET_S="5")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 4, log[-3000:]  # imports, bench, train, check
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.count("| SKIPPED |") == 4 and "commit test" in summary
    assert (tmp_path / "out" / "node-freeze.txt").read_text().count("==") > 10


@pytest.mark.slow
def test_the_dry_run_times_the_estimators_and_trains_the_default_experiment(tmp_path):
    proc = _run(tmp_path, GPU_RUN_PARTS="bench train", GPU_RUN_BUDGET_S="600")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == {
        "gpu_run.log",
        "node-freeze.txt",
        "estimators.md",
        "summary.md",
    }
    assert all(p.stat().st_size < 2**20 for p in out.iterdir())
    assert "memory-bandwidth floor" in (out / "estimators.md").read_text()
    summary = (out / "summary.md").read_text()
    assert "| imports | PASS |" in summary and "| estimators on cpu | PASS |" in summary
    assert "| default experiment, lightning=gpu | PASS |" in summary
    assert "| default.db | tiny | cpu, bf16-mixed, auto | 2 |" in summary
