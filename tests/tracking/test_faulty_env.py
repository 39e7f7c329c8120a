"""The fault injector itself (``faulty_env.py``), not a fault: docs/FAULTS.md lists the faults' tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_faulty_env_loads_in_a_training_subprocess():
    """The slow tests train in ``python -m gigpo_lab.cli train`` subprocesses with only the repository on
    ``PYTHONPATH``, and Hydra imports the faulty env there by name. A test-only import in its module
    (``tiny_sizes``, which only pytest puts on the path) once made all three fail with rc 1."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(repo)}
    code = "from hydra.utils import get_method; print(get_method('tests.tracking.faulty_env.make_faulty_env').__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "make_faulty_env"
