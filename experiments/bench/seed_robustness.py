"""Seed robustness of one configuration: N seeds in parallel, then solved k/n, collapses and cost.

    python experiments/bench/seed_robustness.py --seeds 10 --jobs 2 -- estimator=grpo env=sokoban
    python experiments/bench/seed_robustness.py --seeds 10 --name lr3e-4 -- trainer.optimizer.lr=3e-4

Every run is a real ``train(cfg)`` (one torch thread each, ``--jobs`` worker processes that import the lab
once) writing to its own sqlite MLflow store under ``--root``; the table is read back from those stores.
Columns, per seed and in total:

- ``final``: the last ``eval/success_rate``; *solved* when it is >= ``--threshold`` (default 0.8).
- ``steps@thr``: ``eval/env_steps_total`` at the first evaluation at or above the threshold.
- ``collapse``: once ``rollout/success_rate`` has passed 0.5, a later iteration whose
  ``rollout/invalid_rate`` is above 0.3 (issue #12's definition), and the number of such iterations.
- ``relapse``: of those iterations, the ones after the invalid rate had already been at or below 0.3 once
  the policy was trained: a real rise, not an invalid rate still falling from its start.
- ``max_kl``: the largest per-iteration ``train/approx_kl`` (a destructive update shows as a spike).
- ``wall``: seconds of ``train(cfg)`` (of its last segment, for a seed continued with ``--resume``).

``--resume`` continues a sweep that was stopped (SIGKILL, a session's end): a seed whose run FINISHED is read
back, not trained again; an unfinished seed continues from its ``run/checkpoints/last.ckpt``
(``ckpt_path=``, exact: the same metrics, bit for bit, as a run never stopped); a seed without one starts.

The summary line gives solved k/n with its exact (Clopper-Pearson) 95% interval.

This is the benchmark behind the seed-robustness tables in docs/WHY_RUNS_FAIL.md: it prints a table and
asserts nothing. The same numbers for a Hydra sweep come from ``gigpo-lab compare``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

COLLAPSE_SUCCESS = 0.5  # rollout success above which the policy counts as trained
COLLAPSE_INVALID = 0.3  # invalid-action rate above which a trained policy counts as collapsed


def _run(job: tuple[list[str], int, str]) -> dict:
    """One seed in a worker process: compose, train, return the path of its store and its wall time."""
    overrides, seed, root = job
    import torch

    torch.set_num_threads(1)
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import train

    out = Path(root) / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:  # a failed seed is reported as text (a worker's exception may not pickle back), not hidden
        train(compose_config(seed_overrides(overrides, seed, out)))
        error = None
    except Exception as err:
        error = f"{type(err).__name__}: {err}"[:300]
    return {"seed": seed, "uri": _store_uri(out), "wall": time.perf_counter() - start, "error": error}


def _store_uri(out: Path) -> str:
    """The MLflow store of the seed whose folder is ``out``."""
    return f"sqlite:///{out / 'mlflow.db'}"


def seed_overrides(overrides: list[str], seed: int, out: Path) -> list[str]:
    """The overrides of one seed's run under ``out``. Its paths are quoted: the folder is named after the
    overrides unless ``--name`` is given, and an unquoted ``=`` in a path does not parse."""
    from gigpo_lab.config_paths import quoted_override

    return [
        *overrides,
        f"seed={seed}",
        "lightning.num_threads=1",
        "lightning.progress_bar=false",
        quoted_override("tracking.uri", _store_uri(out)),
        quoted_override("output_dir", out / "run"),
    ]


def _resumed(root: Path, seed: int, resume: bool) -> list[str]:
    """``ckpt_path=`` of the seed's last checkpoint when ``resume`` and it has one; else nothing."""
    last = Path(root) / f"seed{seed}" / "run" / "checkpoints" / "last.ckpt"
    return [f"ckpt_path={last}"] if resume and last.is_file() else []


def _histories(uri: str) -> dict[str, dict[int, float]]:
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    run = client.search_runs(exp_ids, max_results=1, order_by=["attributes.start_time DESC"])[0]
    return {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        for key in run.data.metrics
    }


def _finished(root: Path, seeds) -> list[dict]:
    """The seeds under ``root`` whose run FINISHED (wall time from the run's own ``wall_s`` tag)."""
    import mlflow

    out = []
    for seed in seeds:
        if not (root / f"seed{seed}" / "mlflow.db").is_file():
            continue
        uri = _store_uri(root / f"seed{seed}")
        client = mlflow.MlflowClient(uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1)
        if runs and runs[0].info.status == "FINISHED":
            wall = float(runs[0].data.tags.get("wall_s", "nan"))
            out.append({"seed": seed, "uri": uri, "wall": wall, "error": None})
    return out


def count_collapses(success: dict[int, float], invalid: dict[int, float]) -> tuple[int, int]:
    """(collapse iterations by issue #12's definition, relapses among them) from per-iteration rollout
    success and invalid rates (module docstring)."""
    trained, settled, collapses, relapses = False, False, 0, 0
    for it in sorted(success):
        if trained:
            if invalid.get(it, 0.0) > COLLAPSE_INVALID:
                collapses += 1
                relapses += settled
            else:
                settled = True
        trained = trained or success[it] > COLLAPSE_SUCCESS
    return collapses, relapses


def summarize(result: dict, threshold: float) -> dict:
    """The per-seed row: final eval, steps to the threshold, collapses, the largest approx_kl, and the curves
    (greedy evals with their env steps, sampled success per iteration) that ``plot_curves.py`` draws."""
    h = _histories(result["uri"])
    evals = sorted(h.get("eval/success_rate", {}).items())
    steps = h.get("eval/env_steps_total", {})
    final = evals[-1][1] if evals else math.nan
    reached = [steps.get(s, math.nan) for s, v in evals if v >= threshold]
    succ, invalid = h.get("rollout/success_rate", {}), h.get("rollout/invalid_rate", {})
    collapses, relapses = count_collapses(succ, invalid)
    kls = list(h.get("train/approx_kl_max", h.get("train/approx_kl", {})).values())
    return {
        "seed": result["seed"],
        "final": final,
        "solved": final >= threshold,
        "steps": reached[0] if reached else math.nan,
        "collapses": collapses,
        "relapses": relapses,
        "max_kl": max(kls) if kls else math.nan,
        "rollout_final": succ[max(succ)] if succ else math.nan,
        "wall": result["wall"],
        "error": result["error"],
        "evals": [round(v, 2) for _, v in evals],
        "eval_steps": [steps.get(s, math.nan) for s, _ in evals],  # env steps at each evaluation
        "rollouts": [round(succ[s], 2) for s in sorted(succ)],  # sampled success, per iteration
    }


def print_table(name: str, rows: list[dict], threshold: float) -> None:
    print(f"\n## {name}\n")
    print(
        "| seed | final eval | steps@thr | collapse iters | relapse iters | max approx_kl | rollout final "
        "| wall s | evals |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['final']:.2f} | {r['steps']:.0f} | {r['collapses']} | {r['relapses']} | {r['max_kl']:.3g} | "
            f"{r['rollout_final']:.2f} | {r['wall']:.0f} | {' '.join(map(str, r['evals']))}"
            + (f" ERROR {r['error']}" if r["error"] else "")
            + " |"
        )
    solved = [r for r in rows if r["solved"]]
    steps = [r["steps"] for r in solved if math.isfinite(r["steps"])]
    finals = [r["final"] for r in rows]
    from gigpo_lab.analysis.stats import clopper_pearson

    low, high = clopper_pearson(len(solved), len(rows))
    print(
        f"\n**{name}: solved {len(solved)}/{len(rows)}** [{low:.2f}, {high:.2f}] (Clopper-Pearson 95%; "
        f"final eval >= {threshold}); "
        f"final eval mean {statistics.fmean(finals):.2f}, min {min(finals):.2f}; "
        f"runs with a collapse: {sum(r['collapses'] > 0 for r in rows)} "
        f"(with a relapse: {sum(r['relapses'] > 0 for r in rows)}); "
        f"median env steps to threshold: {statistics.median(steps) if steps else math.nan:.0f}; "
        f"median wall: {statistics.median(r['wall'] for r in rows):.0f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="parallel worker processes (default 2)")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--name", default=None, help="a label for the table (default: the overrides)")
    parser.add_argument("--root", default="/tmp/seed_robustness", help="where the stores are written")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="train nothing: summarise the finished seeds already under --root",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="read the finished seeds, continue the others from their last checkpoint (module docstring)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, after --")
    args = parser.parse_args(argv)
    name = args.name or (" ".join(args.overrides) or "default")
    root = Path(args.root) / name.replace(" ", "_").replace("/", "_")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(list(args.overrides), s, str(root)) for s in seeds]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import lightning  # noqa: F401

    import gigpo_lab.train  # noqa: F401  (imported once here, shared by the forked workers)
    from gigpo_lab.config_paths import compose_config

    try:  # a bad override stops here, before any seed starts
        compose_config(seed_overrides(list(args.overrides), args.first_seed, root / "check"))
    except Exception as err:
        raise SystemExit(
            "seed_robustness.py: the overrides do not compose: "
            + " ".join(str(err).split("Config search path")[0].split())  # one line, with the options
        ) from None

    start = time.perf_counter()
    if args.read_only:
        results = _finished(root, seeds)
    else:
        done = _finished(root, seeds) if args.resume else []
        finished = {row["seed"] for row in done}
        jobs = [(o + _resumed(root, s, args.resume), s, r) for o, s, r in jobs if s not in finished]
        with mp.get_context("fork").Pool(args.jobs, maxtasksperchild=4) as pool:
            results = sorted(done + pool.map(_run, jobs, chunksize=1), key=lambda row: row["seed"])
    rows = [summarize(r, args.threshold) for r in results]
    print_table(name, rows, args.threshold)
    print(f"total wall {time.perf_counter() - start:.0f} s with {args.jobs} jobs; load {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"name": name, "rows": rows}, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
