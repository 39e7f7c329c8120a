"""``gigpo-lab import-metrics FILE… [--store URI]``: send the writes a run kept while MLflow was unreachable.

A run whose store went away writes what it could not send to ``<output_dir>/mlflow_unsent_*.jsonl``
(``gigpo_lab.tracking.buffer``) and says so at the end. This command replays those records into the
run they belong to, oldest first: metrics (points the store already holds are skipped, so importing twice
writes nothing twice), sample texts, tags, the checkpoint artifact and the run's end status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from gigpo_lab.tracking.buffer import apply_record
from gigpo_lab.tracking.mlflow_tracker import MlflowTracker


def read_records(path: str | Path) -> list[dict]:
    """The records of a fallback file, in order; a clear error on a line that is not a record."""
    records = []
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                record["kind"], record["run_id"]  # noqa: B018 - the two fields every record has
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(
                    f"{path}:{number} is not a gigpo-lab fallback record ({err}); "
                    "expected one JSON object a line with 'kind' and 'run_id'"
                ) from None
            records.append(record)
    return records


def import_file(path: str | Path, uri: str | None = None) -> Counter:
    """Replay the records of ``path`` into their runs (on ``uri``, default: the store each record names).

    Returns counts: ``metric_points`` written, ``metric_points_present`` skipped, and one count per kind.
    """
    counts: Counter = Counter()
    trackers: dict[tuple[str, str], tuple[MlflowTracker, set]] = {}
    for record in read_records(path):
        key = (uri or record["uri"], record["run_id"])
        if key not in trackers:
            tracker = MlflowTracker(key[0], experiment="", run_id=key[1])
            tracker.check_reachable()
            trackers[key] = (tracker, tracker.logged_points())
        tracker, skip = trackers[key]
        written = apply_record(tracker, record, skip)
        counts[record["kind"]] += 1
        if record["kind"] == "metrics":
            counts["metric_points"] += written
            counts["metric_points_present"] += len(record["metrics"]) - written
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gigpo-lab import-metrics",
        description="Send the metrics, texts, tags, artifacts and end status that a run kept in "
        "mlflow_unsent_*.jsonl while its MLflow store was unreachable.",
    )
    parser.add_argument("files", nargs="+", help="fallback files (<output_dir>/mlflow_unsent_*.jsonl)")
    parser.add_argument("--store", default=None, help="tracking URI; default: the store each record names")
    args = parser.parse_args(argv)
    for path in args.files:
        try:
            counts = import_file(path, args.store)
        except (OSError, ValueError, RuntimeError) as err:
            sys.stderr.write(f"gigpo-lab import-metrics: {err}\n")
            return 1
        sys.stdout.write(
            f"{path}: {counts['metric_points']} metric points written "
            f"({counts['metric_points_present']} already in the store), {counts['text']} texts, "
            f"{counts['tags']} tag sets, {counts['artifact']} artifacts, {counts['end']} end status\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
