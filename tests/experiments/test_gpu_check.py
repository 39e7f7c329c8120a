"""experiments/gpu_check.sh, the prepared GPU check, runs its plumbing end to end on a CPU with a tiny model
(GPU_CHECK_TINY=1): every part passes, and the throughput table is written. The script is only run on a GPU
when a session is lent one, so this dry run is what keeps it from rotting between those runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_check_dry_run_passes_every_part(tmp_path):
    env = {**os.environ, "GPU_CHECK_TINY": "1", "PY": sys.executable, "OUT": str(tmp_path)}
    proc = subprocess.run(
        ["bash", "experiments/gpu_check.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    parts = [line for line in log.splitlines() if line.startswith("=== ") and ": " in line]
    assert len(parts) == 5 and all(": PASS in" in line for line in parts), parts
    assert "the update's kernels are finite at every length" in log, "the sdpa probe ran its table"
    assert any("under lightning=fsdp" in line for line in parts), "the sharded run is one of them"
    assert (tmp_path / "throughput.md").read_text().count("|") > 4
