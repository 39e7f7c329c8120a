"""The console script and ``python -m gigpo_lab.cli train`` as real processes, from another working directory,
and from a non-editable (wheel) install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def _run(args, cwd, **env):
    return subprocess.run(args, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=600)


def test_help_lists_the_commands(tmp_path):
    out = _run([str(BIN / "gigpo-lab"), "--help"], tmp_path)
    assert out.returncode == 0 and "train" in out.stdout


def test_unknown_command_names_the_valid_ones(tmp_path):
    out = _run([str(BIN / "gigpo-lab"), "trian"], tmp_path)
    assert out.returncode == 2 and "valid commands: train" in out.stderr


def test_console_script_trains_from_any_directory_into_a_local_sqlite_store(tmp_path):
    out = _run([str(BIN / "gigpo-lab"), "train", *TINY, "estimator=grpo"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "mlflow.db").is_file()  # the default store: sqlite under the working directory
    assert "run finished" in out.stderr and "gigpo-lab ui" in out.stderr
    assert list((tmp_path / "outputs").rglob("last.ckpt"))  # Hydra's run dir under the working directory


@pytest.mark.slow  # 13 s; the console script's own run above covers the same entry point
def test_python_dash_m_works_too(tmp_path):
    out = _run([sys.executable, "-m", "gigpo_lab.cli", "train", *TINY, "trainer.iterations=1"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "mlflow.db").is_file()


@pytest.mark.slow
def test_non_editable_install_finds_its_configs(tmp_path):
    """A wheel install carries conf/, experiments/ and sweeps/ inside the package."""
    site = tmp_path / "site"
    # build from a copy of the files git knows (tracked, or new and not ignored): setuptools builds in the
    # source tree, and a stale build/ left there by an earlier install would ship modules deleted since
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    source = tmp_path / "source"
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    build = _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(source)],
        tmp_path,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    assert (site / "gigpo_lab" / "_configs" / "conf" / "config.yaml").is_file()
    work = tmp_path / "work"
    work.mkdir()
    probe = _run(
        [sys.executable, "-c", "import gigpo_lab.config_paths as c; print(c.config_root())"],
        work,
        PYTHONPATH=str(site),
    )
    assert probe.stdout.strip() == str(site / "gigpo_lab" / "_configs")
    out = _run(
        [sys.executable, "-m", "gigpo_lab.cli", "train", *TINY, "trainer.iterations=1"],
        work,
        PYTHONPATH=str(site),
    )
    assert out.returncode == 0, out.stderr[-3000:]
