"""Does SmolLM2 learn? One experiment file run as 3 GiGPO seeds, a frozen control and one GRPO seed.

    python experiments/llm_learning.py                                # experiments=smollm2_frozenlake2x2
    python experiments/llm_learning.py --experiment smollm2_textworld_coin --threads 2
    python experiments/llm_learning.py --read-only                    # table and PNG from the store only

Each experiment keeps its own store and figure by default: ``/tmp/llm_learning/<experiment>/`` and
``experiments/results/<experiment>.png``.

Every run is a real ``train(cfg)`` of the experiment file, one after the other in this process, all into one
sqlite MLflow store (``--root``/mlflow.db); the runs are (label: overrides)

- ``gigpo s0``, ``gigpo s1``, ``gigpo s2``: ``seed=0``, ``1``, ``2``;
- ``frozen s0``: ``seed=0 trainer.optimizer.lr=0``: the weights do not move (docs/notebook/2026-11_llm_and_speed.md's recorded control
  ran at lr 1e-30, where AdamW's steps round away, before lr 0 was accepted). Every evaluation draws from the same sampling seeds, so its curve
  stays at the zero-shot rate exactly; its rollouts, drawn afresh each iteration, show the sampling noise;
- ``grpo s0``: ``seed=0 estimator=grpo`` (a first look, not a study).

Then it reads the ``eval/success_rate`` curves back from the store and prints one row per run: the
zero-shot rate (the evaluation before the first update), the final and best rates, final - zero-shot, the
wall time, whether the run improved by ``--target`` (0.3) or more, and the minutes from the run's start to
the first evaluation that was that far above zero-shot; and it draws the curves (x: training
env steps, one line per run, the frozen control dashed) into ``--png``. It asserts nothing: it reports.
Overrides after ``--`` go to every run (e.g. ``-- trainer.iterations=6``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

#: label -> the overrides that make the run (added to the experiment and the shared overrides).
RUNS: dict[str, list[str]] = {
    "gigpo s0": ["seed=0"],
    "gigpo s1": ["seed=1"],
    "gigpo s2": ["seed=2"],
    "frozen s0": ["seed=0", "trainer.optimizer.lr=0"],
    "grpo s0": ["seed=0", "estimator=grpo"],
}
#: The MLflow tag that names a run's label in the store.
LABEL_TAG = "llm_learning.label"


def train_one(label: str, overrides: list[str], root: Path) -> str | None:
    """Compose and train one run into ``root``'s store; its run id (None if it failed before opening one)."""
    import mlflow

    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import train

    uri = f"sqlite:///{root / 'mlflow.db'}"
    slug = label.replace(" ", "_")
    cfg = compose_config([*overrides, f"tracking.uri={uri}", f"output_dir={root / 'runs' / slug}"])
    client = mlflow.MlflowClient(uri)
    before = {r.run_id for r in _runs(uri, cfg.tracking.experiment)}
    start = time.perf_counter()
    try:
        train(cfg)
    except Exception as err:  # a failed run is reported, the others still run
        print(f"{label}: FAILED after {time.perf_counter() - start:.0f} s: {type(err).__name__}: {err}"[:400])
    run_id = own_run(_runs(uri, cfg.tracking.experiment), before, str(cfg.output_dir))
    if run_id is not None:
        client.set_tag(run_id, LABEL_TAG, label)
    return run_id


def own_run(runs: list, before: set[str], output_dir: str) -> str | None:
    """The id of the newest of ``runs`` (newest first) that is not in ``before`` and logged ``output_dir``:
    another process may have opened runs in the same store meanwhile (a second ``--only`` invocation), and
    the newest new run alone could be its."""
    return next(
        (r.run_id for r in runs if r.run_id not in before and r.params.get("output_dir") == output_dir),
        None,
    )


def own_artifacts(uri: str, experiment: str, folder: Path) -> None:
    """Create the MLflow experiment with its artifacts under ``folder`` (MLflow's default is ./mlruns of the
    working directory, which would put sample files into the repository)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        client.create_experiment(experiment, artifact_location=folder.as_uri())


def _runs(uri: str, experiment: str) -> list:
    """The experiment's runs, newest first (the lab's one reader); none when it does not exist yet."""
    from gigpo_lab.analysis.runs import experiment_records

    try:
        return sorted(experiment_records(uri, experiment), key=lambda r: r.start_time, reverse=True)
    except ValueError:
        return []


def read_curves(uri: str, experiment: str) -> list[dict]:
    """The newest run of each label in the store: its eval curve (env steps, success rate) and wall time."""
    from gigpo_lab.analysis.runs import metric_history

    rows, seen = [], set()
    for run in _runs(uri, experiment):
        label = run.tags.get(LABEL_TAG)
        if label is None or label in seen:
            continue
        seen.add(label)
        history = metric_history(uri, run.run_id, "eval/success_rate")
        rates = {step: value for step, value, _ in history}
        logged = {step: stamp for step, _, stamp in history}  # ms since the epoch, when the rate was logged
        steps = {step: value for step, value, _ in metric_history(uri, run.run_id, "eval/env_steps_total")}
        its = sorted(rates)
        rows.append(
            {
                "label": label,
                "status": run.status,
                "iterations": its,
                "env_steps": [steps.get(i, math.nan) for i in its],
                "rates": [rates[i] for i in its],
                "minutes": [(logged[i] - run.start_time) / 60_000 for i in its],
                "wall": float(run.tags.get("wall_s", "nan")),
            }
        )
    order = list(RUNS)
    return sorted(rows, key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))


def print_table(rows: list[dict], target: float) -> None:
    """One row per run: zero-shot, final, final - zero-shot, best, wall, improved by >= target, and the
    minutes from the run's start to the first evaluation that was ``target`` above zero-shot."""
    print(
        f"| run | status | zero-shot | final | delta | best | wall s | improved >= +{target:g} "
        f"| min to +{target:g} | curve |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---|")
    for r in rows:
        rates = r["rates"]
        first, last = (rates[0], rates[-1]) if rates else (math.nan, math.nan)
        delta = last - first
        curve = " ".join(f"{v:.2f}" for v in rates)
        reached = minutes_to(r, target)
        print(
            f"| {r['label']} | {r['status']} | {first:.2f} | {last:.2f} | {delta:+.2f} | "
            f"{max(rates, default=math.nan):.2f} | {r['wall']:.0f} | {'yes' if delta >= target else 'no'} | "
            f"{'-' if reached is None else f'{reached:.1f}'} | {curve} |"
        )
    gigpo = [r for r in rows if r["label"].startswith("gigpo") and r["rates"]]
    hits = sum(r["rates"][-1] - r["rates"][0] >= target for r in gigpo)
    print(f"\nGiGPO seeds improved by >= +{target:g}: {hits} of {len(gigpo)} (the issue asks for 2 of 3)")


def minutes_to(row: dict, target: float) -> float | None:
    """Minutes from the run's start to its first evaluation at least ``target`` above the zero-shot one (the
    first); None if none was."""
    rates = row["rates"]
    return next((m for r, m in zip(rates, row["minutes"], strict=True) if r - rates[0] >= target), None)


def plot(rows: list[dict], path: Path, title: str) -> None:
    """The eval curves against training env steps; the frozen control dashed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for r in rows:
        frozen = r["label"].startswith("frozen")
        ax.plot(r["env_steps"], r["rates"], "--" if frozen else "-", marker="o", ms=3, label=r["label"])
    ax.set_xlabel("training env steps")
    ax.set_ylabel("eval success rate (sampled)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"curves: {path}")


def store_and_figure(experiment: str, root: str | None, png: str | None) -> tuple[Path, Path]:
    """The store folder and the figure: as given, else one of each per experiment, so that studying one
    experiment never overwrites another's runs or curves."""
    return (
        Path(root or f"/tmp/llm_learning/{experiment}").resolve(),
        Path(png or f"experiments/results/{experiment}.png"),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", default="smollm2_frozenlake2x2", help="a file of experiments/")
    parser.add_argument(
        "--root",
        default=None,
        help="the store (mlflow.db) and run outputs (default /tmp/llm_learning/<experiment>)",
    )
    parser.add_argument(
        "--png", default=None, help="the curves (default experiments/results/<experiment>.png)"
    )
    parser.add_argument("--threads", type=int, default=2, help="lightning.num_threads of every run")
    parser.add_argument("--target", type=float, default=0.3, help="the improvement that counts (absolute)")
    parser.add_argument("--only", nargs="*", choices=list(RUNS), default=None, help="run only these labels")
    parser.add_argument("--read-only", action="store_true", help="train nothing: report what the store holds")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run, after --")
    args = parser.parse_args(argv)
    root, png = store_and_figure(args.experiment, args.root, args.png)
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    shared = [f"experiments={args.experiment}", f"lightning.num_threads={args.threads}", *args.overrides]
    from gigpo_lab.config_paths import compose_config

    experiment = compose_config(shared).tracking.experiment
    uri = f"sqlite:///{root / 'mlflow.db'}"
    if not args.read_only:
        own_artifacts(uri, experiment, root / "artifacts")
    start = time.perf_counter()
    if not args.read_only:
        for label in args.only or list(RUNS):
            print(f"== {label}: {' '.join(RUNS[label])}", flush=True)
            train_one(label, [*shared, *RUNS[label]], root)
    rows = read_curves(uri, experiment)
    print()
    print_table(rows, args.target)
    plot(rows, png, f"{args.experiment}: SmolLM2-135M + LoRA, sampled eval")
    print(f"total wall {time.perf_counter() - start:.0f} s; load average {os.getloadavg()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
