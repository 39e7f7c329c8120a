"""A new sqlite MLflow store: created and migrated by MLflow, against copied from the lab's template
(gigpo_lab/tracking/store_template.py), side by side in one process, alternating.

    python experiments/bench/bench_store.py [--pairs 5]

Each trial opens a new store at a new path with a real MlflowClient (``search_experiments``, which is what
``MlflowTracker.check_reachable`` does first) and reports wall and CPU seconds; the template is built before
the first pair (its one-off cost is printed apart). Prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _open(db: Path, seeded: bool) -> tuple[float, float]:
    from mlflow.tracking import MlflowClient

    from gigpo_lab.tracking.store_template import seed_store

    w, c = time.perf_counter(), time.process_time()
    if seeded:
        assert seed_store(db)
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)
    return time.perf_counter() - w, time.process_time() - c


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    cache = os.environ.get("GIGPO_LAB_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GIGPO_LAB_CACHE"] = str(Path(tmp) / "cache")  # a template of its own, built here
        _open(Path(tmp) / "warm.db", seeded=False)  # imports and MLflow's first-use work, outside the pairs
        from gigpo_lab.tracking.store_template import _build_template, template_path

        w, c = time.perf_counter(), time.process_time()
        _build_template(template_path())
        print(f"template, built once per MLflow version: wall {time.perf_counter() - w:.2f} s, "
              f"CPU {time.process_time() - c:.2f} s")  # fmt: skip
        times = {False: [], True: []}
        for i in range(args.pairs):
            for seeded in (False, True):
                times[seeded].append(_open(Path(tmp) / f"{i}-{seeded}.db", seeded))
    if cache is None:
        os.environ.pop("GIGPO_LAB_CACHE")
    else:
        os.environ["GIGPO_LAB_CACHE"] = cache
    print(f"{'new store':<22}{'wall s (median)':>16}{'CPU s (median)':>16}")
    med = {k: [statistics.median(t[j] for t in v) for j in (0, 1)] for k, v in times.items()}
    for seeded, label in ((False, "MLflow migrates"), (True, "copied template")):
        print(f"{label:<22}{med[seeded][0]:>16.3f}{med[seeded][1]:>16.3f}")
    print(
        f"{'ratio copied/migrated':<22}{med[True][0] / med[False][0]:>16.3f}{med[True][1] / med[False][1]:>16.3f}"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", file=sys.stderr)


if __name__ == "__main__":
    main()
