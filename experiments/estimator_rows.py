"""The per-seed rows of an estimator sweep on the instrument's metrics (issue #45), from its MLflow store.

    python experiments/estimator_rows.py --store sqlite:///path/mlflow.db --out experiments/results/<name>

For each finished run of the store's latest sweep: estimator, seed, ``eval/final`` and ``eval/auc`` (sampled
evaluation), the last greedy success, the env steps used, and the dose of the exploration stream: the median
``adv/stream_ratio`` over the first 10 iterations. Writes ``per_seed.json`` (every run) and ``rows.md``: per
estimator the mean of each metric with a 95% percentile-bootstrap interval over seeds (50,000 resamples), and
the median dose; the largest ratio between two estimators' median doses is printed under the table. Each run's
evaluation seconds (``time/eval_s`` summed) and wall seconds are kept in the JSON, for evaluation's share.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from gigpo_lab.analysis.runs import metric_history, select_runs

RESAMPLES = 50_000
DOSE_ITERATIONS = 10


def _last(uri: str, run_id: str, key: str) -> float | None:
    points = metric_history(uri, run_id, key)
    return points[-1][1] if points else None


def read_runs(uri: str) -> list[dict]:
    """One dict per finished run of the store's latest sweep (the lab's one reader, ``select_runs``: a job a
    resumed sweep ran again counts once, its latest run)."""
    records = select_runs(uri, metric="eval/final").records
    rows = []
    for run in (r for r in records if r.finished):
        rid = run.run_id
        early = [v for step, v, _ in metric_history(uri, rid, "adv/stream_ratio") if step < DOSE_ITERATIONS]
        rows.append(
            {
                "estimator": run.tags["estimator"],
                "seed": int(run.tags["seed"]),
                "run_id": rid,
                "eval_final": _last(uri, rid, "eval/final"),
                "eval_auc": _last(uri, rid, "eval/auc"),
                "greedy_success": _last(uri, rid, "eval/greedy_success_rate"),
                "env_steps": _last(uri, rid, "rollout/env_steps_total"),
                "stream_ratio_median_first10": statistics.median(early) if early else None,
                "eval_s_total": sum(v for _, v, _ in metric_history(uri, rid, "time/eval_s")),
                "wall_s": float(run.tags["wall_s"]) if "wall_s" in run.tags else None,
            }
        )
    return sorted(rows, key=lambda r: (r["estimator"], r["seed"]))


def mean_ci(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The mean of (n,) values and its 95% percentile-bootstrap interval (``RESAMPLES`` resamples)."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))].mean(axis=1)
    return float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def table(rows: list[dict]) -> str:
    """The markdown table of ``rows`` by estimator, and the spread of the median doses."""
    lines = [
        "| estimator | seeds | eval/final (sampled, mean [95% CI]) | eval/auc | greedy success, last eval | "
        "dose: median stream_ratio, iterations 0-9 |",
        "|---|---|---|---|---|---|",
    ]
    doses = {}
    for name in sorted({r["estimator"] for r in rows}):
        mine = [r for r in rows if r["estimator"] == name]
        cells = []
        for key in ("eval_final", "eval_auc", "greedy_success"):
            m, lo, hi = mean_ci([r[key] for r in mine])
            cells.append(f"{m:.3f} [{lo:.3f}, {hi:.3f}]")
        ratios = [
            r["stream_ratio_median_first10"] for r in mine if r["stream_ratio_median_first10"] is not None
        ]
        doses[name] = statistics.median(ratios) if ratios else None
        dose = f"{doses[name]:.3f}" if doses[name] is not None else "-"
        lines.append(f"| {name} | {len(mine)} | {' | '.join(cells)} | {dose} |")
    known = [d for d in doses.values() if d]
    if known:
        lines.append("")
        lines.append(f"Largest ratio between two estimators' median doses: {max(known) / min(known):.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    rows = read_runs(args.store)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "per_seed.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = table(rows)
    (args.out / "rows.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
