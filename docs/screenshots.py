"""Screenshots of the MLflow UI for docs/TUTORIAL.md, taken by headless Chromium (``make screenshots``).

Runs a tiny ω sweep (2 values x 2 seeds) and ``gigpo-lab compare`` in a scratch folder, starts ``gigpo-lab
ui`` on it, and saves six pages into ``docs/images/``, each in a fresh browser profile (what a newcomer sees)
and in model-training mode (the ``workflowType=machine_learning`` that the sweep link of ``gigpo-lab ui``
carries; ``gigpo_lab/ui.py`` says what MLflow 3.17 reads): the experiment's runs table (the sweep's parent
run), the sweep's saved view (the link ``gigpo-lab ui`` prints: one row per job with ω, estimator, seed and
eval success) as a table and as charts, a child run's metric charts, the parent run's overview (its
description: the overrides and the compare command) and one of its artifacts (the compare report's learning
curves).

Needs ``chromium`` on PATH (Debian: ``apt-get install -y chromium``). Look at the images before committing
them: a page that had not finished rendering is blank.

    python docs/screenshots.py [--out docs/images] [--keep /tmp/shots]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gigpo_lab.ui import MODEL_TRAINING_QUERY  # noqa: E402

BIN = Path(sys.executable).parent
#: The sweep: small enough for a 2-core machine, big enough for curves.
SWEEP = [
    "-m",
    "estimator.step_advantage_weight=0.0,1.0",
    "seed=0,1",
    "trainer.iterations=20",
    "trainer.eval_every=5",
    "rollout.groups=4",
    "rollout.group_size=4",
    "lightning.num_threads=1",
    "tracking.experiment=gigpo-step-weight",
]
#: Pages of the UI (after ``#/experiments/<id>``; ``{sweep}`` is the query of the sweep's link) and how long
#: Chromium lets each render (ms).
PAGES = {
    "ui_runs_table.png": ("/runs?" + MODEL_TRAINING_QUERY, 30000),
    "ui_sweep_expanded.png": ("/runs?{sweep}", 30000),
    "ui_sweep_charts.png": ("/runs?{sweep}&compareRunsMode=CHART", 60000),
    "ui_child_charts.png": ("/runs/{child}/model-metrics?" + MODEL_TRAINING_QUERY, 90000),
    "ui_parent_overview.png": ("/runs/{parent}?" + MODEL_TRAINING_QUERY, 30000),
    "ui_parent_artifacts.png": (
        "/runs/{parent}/artifacts/compare/learning_curves-eval_final.png?" + MODEL_TRAINING_QUERY,
        30000,
    ),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([str(BIN / "gigpo-lab"), *args], cwd=cwd, env=env, check=True)


def _ids(store: str) -> tuple[str, str, str]:
    """(experiment id, parent run id, one child run id) of the sweep."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("gigpo-step-weight")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    child = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id)
    return exp.experiment_id, parent.info.run_id, child.info.run_id


def _shoot(chromium: str, url: str, path: Path, budget_ms: int) -> None:
    """One page in a fresh profile (no localStorage: MLflow's defaults, as on a newcomer's browser)."""
    with tempfile.TemporaryDirectory(prefix="gigpo-shots-profile-") as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1500,900",
                "--run-all-compositor-stages-before-draw",
                f"--virtual-time-budget={budget_ms}",
                f"--screenshot={path}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"), help="where the PNGs go")
    parser.add_argument("--keep", help="scratch folder to keep (default: a temporary one, removed)")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.stderr.write("screenshots: no chromium on PATH (Debian: apt-get install -y chromium)\n")
        return 2
    work = Path(args.keep or tempfile.mkdtemp(prefix="gigpo-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{work / 'mlflow.db'}"
    if not (work / "mlflow.db").exists():
        _run(["train", *SWEEP], work)
        _run(["compare", "--experiment", "gigpo-step-weight"], work)
    exp_id, parent, child = _ids(store)
    port = _free_port()
    ui = subprocess.Popen(
        [str(BIN / "gigpo-lab"), "ui", "--store", store, "--port", str(port)],
        cwd=work,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = ui.stdout.readline()  # "MLflow UI: http://127.0.0.1:PORT ..." once it answers
        url = re.search(r"(http://\S+)", line).group(1)
        link = re.search(r"newest sweep: (\S+)", ui.stdout.readline()).group(1)
        sweep = link.split("?", 1)[1]  # workflowType=machine_learning&viewStateShareKey=<sweep id>
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, (page, budget) in PAGES.items():
            target = f"{url}/#/experiments/{exp_id}" + page.format(parent=parent, child=child, sweep=sweep)
            _shoot(chromium, target, out / name, budget)
            sys.stdout.write(f"{out / name}  <- {target}\n")
        time.sleep(0.5)
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=60)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
