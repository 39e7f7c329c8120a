"""Screenshots of the MLflow UI for docs/TUTORIAL.md, taken by headless Chromium (``make screenshots``).

Runs a tiny ω sweep (2 values x 2 seeds) and ``gigpo-lab compare`` in a scratch folder, starts ``gigpo-lab
ui`` on it, and saves five pages into ``docs/images/``: the experiment's runs table (the sweep's parent
run), the same table with the sweep expanded (needs Node.js and ``npm install playwright-core``), a child run's metric charts, the parent run's overview (its description: the overrides and the
compare command) and one of its artifacts (the compare report's learning curves).

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
BIN = Path(sys.executable).parent
#: The sweep: small enough for a 2-core machine, big enough for curves.
SWEEP = [
    "-m",
    "estimator.step_advantage_weight=0.0,1.0",
    "seed=0,1",
    "trainer.iterations=6",
    "trainer.eval_every=2",
    "rollout.groups=4",
    "rollout.group_size=4",
    "lightning.num_threads=1",
    "tracking.experiment=gigpo-step-weight",
]
#: Pages of the UI (after ``#/experiments/<id>``) and how long Chromium lets each render (ms).
PAGES = {
    "ui_runs_table.png": ("/runs", 30000),
    "ui_child_charts.png": ("/runs/{child}/model-metrics", 90000),
    "ui_parent_overview.png": ("/runs/{parent}", 30000),
    "ui_parent_artifacts.png": (
        "/runs/{parent}/artifacts/compare/learning_curves-eval_success_rate.png",
        30000,
    ),
}


def _shoot_expanded_sweep(url: str, path: Path) -> None:
    """The runs table with the sweep expanded, through ``docs/screenshot_sweep.js`` (a click needs Playwright);
    skipped with a message when Node.js or playwright-core is missing."""
    node = shutil.which("node")
    probe = subprocess.run([node, "-e", "require('playwright-core')"], capture_output=True) if node else None
    if probe is None or probe.returncode != 0:
        sys.stdout.write(
            "screenshots: skipped ui_sweep_expanded.png (needs node and `npm install playwright-core`)\n"
        )
        return
    subprocess.run(
        [node, str(ROOT / "docs" / "screenshot_sweep.js"), url, str(path)], check=True, timeout=180
    )
    sys.stdout.write(f"{path}  <- {url} (sweep expanded)\n")


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
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
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
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, (page, budget) in PAGES.items():
            target = f"{url}/#/experiments/{exp_id}" + page.format(parent=parent, child=child)
            _shoot(chromium, target, out / name, budget)
            sys.stdout.write(f"{out / name}  <- {target}\n")
        _shoot_expanded_sweep(f"{url}/#/experiments/{exp_id}/runs", out / "ui_sweep_expanded.png")
        time.sleep(0.5)
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=60)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
