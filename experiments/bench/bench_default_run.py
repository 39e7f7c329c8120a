"""Wall time of one default run, old code against new, side by side on one thread (``--threads`` for more).

Runs ``python -m gigpo_lab.cli train <overrides>`` on ``--threads`` torch threads without a progress line (``lightning.*``, or
``trainer.*`` in a tree from before the lightning group) with the old tree and the new tree first on ``PYTHONPATH``, alternately (old, new, old, new, ...), each in a fresh
scratch dir (one sqlite MLflow store per tree, created before the timed runs as in a sweep; ``--fresh-store``
times a first run's store creation too), and prints per tree the median wall time of the whole process
(startup included), the median CPU time (user + sys of the child), the median ``time/wall_s`` the run
reports (fit only), and the new/old ratios, with the 1-minute load average at the start and the end.

On a shared machine the numbers are approximate: other processes stretch the wall time (compare the CPU
times, and the load averages). Alternating the trees spreads that noise over both.

Usage (from the repo root)::

    python experiments/bench/bench_default_run.py --old /work/base --repeats 3
    python experiments/bench/bench_default_run.py --old /work/base --config "trainer.iterations=10"
    python experiments/bench/bench_default_run.py --old /work/base --threads 2 --repeats 2 \
        --config "experiments=smollm2_textworld_coin trainer.iterations=1 trainer.eval_every=0" \
        --new-config "rollout.engine.prefill=tree rollout.engine.autocast=bfloat16 lightning.precision=bf16-mixed"
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from check_bitexact import quiet_overrides  # this folder is on sys.path when the script runs


def _fit_seconds(line: str) -> float | None:
    """The fit time a run's summary prints: ``gigpo-lab: run finished in 12.3 s`` (or the older
    ``time/wall_s 12.3`` line); None for any other line."""
    text = line.strip()
    if text.startswith("gigpo-lab: run finished in "):
        return float(text.split()[-2])
    if text.startswith("time/wall_s"):
        return float(text.split()[-1])
    return None


def one_run(
    tree: Path, overrides: str, python: str, scratch: Path, store: str | None, threads: int = 1
) -> dict[str, float]:
    """Train once with ``tree`` on ``threads`` torch threads; return wall_s (whole process), cpu_s (child
    user+sys) and fit_s (time/wall_s).

    ``store``: the MLflow URI to use (an existing store), or None for a fresh sqlite store in the run's dir."""
    work = Path(tempfile.mkdtemp(dir=scratch, prefix="bench-"))
    uri = store or f"sqlite:///{work / 'mlflow.db'}"
    cmd = [
        python,
        "-m",
        "gigpo_lab.cli",
        "train",
        *shlex.split(overrides),
        *quiet_overrides(tree, threads),
        f"tracking.uri={uri}",
        f"hydra.run.dir={work / 'hydra'}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"training failed with {tree}:\n{proc.stderr[-4000:]}")
    fit = next((_fit_seconds(line) for line in proc.stderr.splitlines() if _fit_seconds(line)), float("nan"))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "fit_s": fit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the old source tree (e.g. /work/base)")
    parser.add_argument("--new", type=Path, default=Path.cwd(), help="the new source tree (default: cwd)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per tree, alternating (default 3)")
    parser.add_argument("--config", default="", help="Hydra overrides (default: none = the default run)")
    parser.add_argument(
        "--new-config",
        default="",
        help="extra overrides for the new tree only, e.g. the old numerics on the new code: "
        "'model.qk_norm=false trainer.optimizer.lr=1e-3'",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run (default 1)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "--fresh-store",
        action="store_true",
        help="a new MLflow store per run, its creation timed (a first run); default: one store per tree, "
        "created before the timed runs (as in a sweep)",
    )
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "gigpo-bench")
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.old, "new": args.new}
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    stores: dict[str, str | None] = {name: None for name in trees}
    if not args.fresh_store:
        for name, tree in trees.items():
            stores[name] = (
                f"sqlite:///{Path(tempfile.mkdtemp(dir=args.scratch, prefix='store-')) / 'mlflow.db'}"
            )
            create = f"from mlflow.tracking import MlflowClient; MlflowClient({stores[name]!r}).search_experiments()"
            subprocess.run(
                [args.python, "-c", create], env={**os.environ, "PYTHONPATH": str(tree)}, check=True
            )
    load_start = os.getloadavg()[0]
    for i in range(args.repeats):
        for name, tree in trees.items():
            overrides = f"{args.config} {args.new_config}" if name == "new" else args.config
            r = one_run(tree, overrides, args.python, args.scratch, stores[name], args.threads)
            results[name].append(r)
            print(f"  run {i + 1}/{args.repeats} {name}: " + "  ".join(f"{k} {v:6.1f}" for k, v in r.items()))
    load_end = os.getloadavg()[0]
    keys = ("wall_s", "cpu_s", "fit_s")
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in results.items()}
    store = "a fresh MLflow store per run" if args.fresh_store else "an existing MLflow store"
    print(
        f"\ndefault run {args.config or '(no overrides)'}, {args.threads} thread(s), {store}, {args.repeats} repeats, medians"
        + (f"; the new tree also with {args.new_config!r}" if args.new_config else "")
    )
    print(f"{'tree':<5} {'wall_s':>8} {'cpu_s':>8} {'fit_s':>8}  source")
    for name in trees:
        print(f"{name:<5} " + " ".join(f"{med[name][k]:8.1f}" for k in keys) + f"  {trees[name]}")
    print("new/old " + " ".join(f"{med['new'][k] / med['old'][k]:8.2f}" for k in keys))
    print(
        f"load average (1 min): {load_start:.2f} at the start, {load_end:.2f} at the end ({os.cpu_count()} cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
