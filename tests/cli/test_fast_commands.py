"""The commands a person waits on import neither torch, Lightning nor MLflow (issue #46): ``gigpo-lab --help``,
``train --help``, ``train ... --cfg job``, a config mistake (still refused at compose time, with the valid
options), a value ``train``'s checks refuse, and ``docs``; an unreachable store is refused before Lightning is imported.
Each runs as its own process; what it imported is read from ``sys.modules`` at its end.
No test asserts a time: ``experiments/bench/bench_cli.py`` measures them."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

HEAVY = ("torch", "lightning", "mlflow")
#: Runs ``gigpo-lab ARGS`` in this process, then prints the heavy modules it imported on the last line.
DRIVER = f"""
import sys
from gigpo_lab.cli import main

sys.argv = ["gigpo-lab", *sys.argv[1:]]
code = 0
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print("exit", code, "heavy", [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)
"""


def _run(args: list[str], cwd) -> tuple[int, str, str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("exit "), out.stderr[-3000:]
    _, code, _, heavy = last.split(" ", 3)
    return int(code) if code != "None" else 0, out.stdout, out.stderr, ast.literal_eval(heavy)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["train", "--help"],
        ["train", "estimator=grpo", "env=sokoban", "seed=3", "--cfg", "job"],
    ],
    ids=["gigpo-lab --help", "train --help", "train --cfg job"],
)
def test_commands_that_answer_import_no_heavy_library(args, tmp_path):
    code, stdout, stderr, heavy = _run(args, tmp_path)
    assert code == 0, stderr[-3000:]
    assert heavy == [], f"gigpo-lab {' '.join(args)} imported {heavy}"
    assert stdout.strip()


def test_a_config_mistake_is_refused_at_compose_time_without_torch(tmp_path):
    code, _, stderr, heavy = _run(["train", "estimator=nope"], tmp_path)
    assert code == 2
    assert "estimator=nope is not an option" in stderr and "grpo" in stderr  # the valid options listed
    assert heavy == []


def test_a_bad_value_is_refused_at_compose_time_without_torch(tmp_path):
    code, _, stderr, heavy = _run(["train", "estimator.mode=mean_nrom"], tmp_path)
    assert code == 2 and "mean_std_norm" in stderr  # the schema's Enum, from the estimator's own module
    assert heavy == []


def test_a_value_train_refuses_is_refused_before_torch_is_imported(tmp_path):
    """A value the schema types but ``train``'s own checks refuse (``validate_config``): Lightning and torch are
    imported only after the checks pass."""
    code, _, stderr, heavy = _run(["train", "rollout.group_size=1"], tmp_path)
    assert code == 2 and "rollout.group_size=1 is not allowed" in stderr
    assert heavy == []
    assert not (tmp_path / "mlflow.db").exists()


def test_an_unreachable_store_is_refused_before_lightning_is_imported(tmp_path):
    """The store is checked before anything is built. MLflow is imported for the check, and torch for the loop
    settings' optimizer class (``instantiate(cfg.trainer)``, which must pass before the check creates a store)."""
    (tmp_path / "a_file").write_text("")
    code, _, stderr, heavy = _run(["train", f"tracking.uri=sqlite:///{tmp_path}/a_file/mlflow.db"], tmp_path)
    assert code != 0 and "cannot be reached" in stderr, stderr[-3000:]
    assert heavy == ["torch", "mlflow"]


def test_docs_imports_no_heavy_library(tmp_path):
    code, _, stderr, heavy = _run(["docs", "--out", str(tmp_path / "CONFIG.md")], tmp_path)
    assert code == 0, stderr[-3000:]
    assert heavy == []
    assert "estimator" in (tmp_path / "CONFIG.md").read_text()


def test_the_help_page_is_hydras_page(tmp_path):
    """``train --help`` renders conf/hydra/help/lab.yaml itself; Hydra's own rendering gives the same page."""
    hydra_page = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, hydra\n"
            "from gigpo_lab.cli.help import register_help_resolver\n"
            "from gigpo_lab.config_paths import conf_dir, register_schemas\n"
            "register_schemas(); register_help_resolver()\n"
            "sys.argv = ['gigpo-lab', '--help']\n"
            "hydra.main(config_path=str(conf_dir()), config_name='config', version_base='1.3')(lambda c: None)()\n",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert hydra_page.returncode == 0, hydra_page.stderr[-3000:]
    code, stdout, stderr, _ = _run(["train", "--help"], tmp_path)
    assert code == 0, stderr[-3000:]
    assert stdout == hydra_page.stdout
