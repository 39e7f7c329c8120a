"""A wheel carries everything a spec needs: the study specs with their registrations, and every config group
below experiments/ (arm/, study_env/, speed/), so a study's plan runs from an installed lab and its arms
compose there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_study_plans_and_its_arms_compose_from_a_built_wheel(tmp_path):
    pytest.importorskip("setuptools")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = tmp_path.glob("gigpo_lab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("studies/gigpo_claims.yaml", "studies/gigpo_claims.registration.yaml", "arm/gigpo_placebo.yaml",
                   "study_env/frozenlake8x8.yaml", "speed/llm_bf16.yaml"):  # fmt: skip
        assert f"gigpo_lab/_configs/experiments/{needed}" in names, needed
    assert not any("/results/" in n for n in names)
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    code = (
        "import gigpo_lab.config_paths as c; assert c.config_root().name == '_configs', c.config_root()\n"
        "cfg = c.compose_config(['+experiments/arm=gigpo_placebo', '+experiments/study_env=frozenlake8x8',"
        " '+experiments/speed=llm_bf16']); assert cfg.estimator.placebo\n"
        "from gigpo_lab.cli import main; raise SystemExit(main(['study', 'plan', 'gigpo_claims']))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Runs: 1990 in 35 cells." in run.stdout
