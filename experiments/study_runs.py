"""The finished runs of a study's MLflow experiment, one row per run, labelled by setting and arm.

A study job's overrides (its ``sweep_job_key`` tag, ``gigpo_lab.tracking.sweep_resume.job_key``) name its
arm and its setting as config groups of experiments/, for example::

    +experiments/arm=gigpo_placebo +experiments/study_env=frozenlake8x8 experiments=pilot seed=103 ...

- ``arm``: the ``+experiments/arm=`` choice, followed by any other override that is not the seed, the store, a
  setting or the study itself (``estimator.step_advantage_weight=0.5`` in the ω study);
- ``setting``: the other ``+experiments/<group>=`` choices (``frozenlake8x8``).

Every FINISHED child run of every sweep of the experiment counts, except runs a resumed sweep superseded;
two FINISHED runs of one (setting, arm, seed) keep the newer and say so.

Rows outlive their store: ``save_rows`` writes them to a JSON file that is committed beside the analysis, and
``load_rows`` reads them back, and ``merge`` joins sources, each run once. For runs whose store and rows are
both gone, ``prior_sides`` recovers what an earlier ``analysis.json`` kept: each contrast's per-seed values of
each side, and ``rows_from_sides`` turns the sides of one arm back into rows marked ``recovered`` (the two
metrics a contrast reads; the others None).
"""

from __future__ import annotations

import json
from pathlib import Path

METRICS = {  # row key -> MLflow metric (its last value)
    "eval_final": "eval/final",
    "eval_auc": "eval/auc",
    "greedy_success": "eval/greedy_success_rate",
    "env_steps": "rollout/env_steps_total",
}
#: Overrides that are not part of an arm's identity.
NOT_ARM = ("seed=", "tracking.", "experiments=", "resume=", "hydra.")


def parse_job_key(key: str) -> tuple[str, str, int]:
    """``(setting, arm, seed)`` of a job from its ``sweep_job_key``."""
    arm, extra, settings, seed = "", [], [], None
    for token in key.split():
        name, _, value = token.partition("=")
        if name == "+experiments/arm":
            arm = value
        elif name.startswith("+experiments/"):
            settings.append(value)
        elif name == "seed":
            seed = int(value)
        elif not token.startswith(NOT_ARM):
            extra.append(token)
    if seed is None:
        raise ValueError(f"job key {key!r} has no seed= override")
    return " ".join(settings) or "default", " ".join([arm or "default", *extra]), seed


def read_runs(uri: str, experiment: str) -> tuple[list[dict], list[str]]:
    """The rows of the experiment's finished runs, sorted by (setting, arm, seed), and notes on duplicates."""
    from mlflow.tracking import MlflowClient

    from gigpo_lab.tracking.sweep_resume import SUPERSEDED_TAG, all_runs

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = ", ".join(e.name for e in client.search_experiments())
        raise SystemExit(f"no experiment {experiment!r} in {uri}; it has: {names}")
    runs = all_runs(client, found.experiment_id, "attributes.status = 'FINISHED'")
    rows, notes = {}, []
    for run in sorted(runs, key=lambda r: r.info.start_time):
        tags = run.data.tags
        if "sweep_job_key" not in tags or SUPERSEDED_TAG in tags:
            continue
        setting, arm, seed = parse_job_key(tags["sweep_job_key"])
        row = {"setting": setting, "arm": arm, "seed": seed, "run_id": run.info.run_id}
        row.update({k: run.data.metrics.get(m) for k, m in METRICS.items()})
        row["wall_s"] = float(tags["wall_s"]) if "wall_s" in tags else None
        if (setting, arm, seed) in rows:
            notes.append(f"{setting} / {arm} / seed {seed}: two finished runs, the newer kept")
        rows[(setting, arm, seed)] = row
    return [rows[k] for k in sorted(rows)], notes


def save_rows(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` (``read_runs``'s) to a JSON file, one row per line."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")


def load_rows(path: Path) -> list[dict]:
    """The rows a ``save_rows`` file holds."""
    return json.loads(path.read_text())


Sides = dict[tuple[str, tuple[str, ...], str], dict[int, float]]


def key(row: dict) -> tuple[str, str, int]:
    """A row's identity: ``(setting, arm, seed)``."""
    return row["setting"], row["arm"], row["seed"]


def merge(*sources: list[dict]) -> tuple[list[dict], list[str]]:
    """The rows of ``sources`` in order, each (setting, arm, seed) once, and a note per one found twice; two
    rows of one key that differ are an error (two stores or rows files that disagree)."""
    rows: dict[tuple[str, str, int], dict] = {}
    notes = []
    for row in (r for source in sources for r in source):
        if key(row) in rows:
            if rows[key(row)] != row:
                raise ValueError(f"{' / '.join(map(str, key(row)))}: two different rows; keep one source")
            notes.append(f"{' / '.join(map(str, key(row)))}: read twice, counted once")
        rows.setdefault(key(row), row)
    return list(rows.values()), notes


def prior_sides(analysis: dict) -> Sides:
    """Every side of every contrast an earlier ``analysis.json`` computed: ``(setting, arms, metric)`` to its
    value per seed, over the seeds of every contrast it was a side of (a side keeps only the seeds it shared
    with each partner). A seed given two different values is an error."""
    sides: Sides = {}
    for name, records in analysis.items():
        if "/" not in name:  # "same_runs", "arms": not contrasts
            continue
        for r in records:
            for arms, values in ((r["a"], r.get("a_values")), (r["b"], r.get("b_values"))):
                if values is None:  # a contrast that had not run
                    continue
                side = sides.setdefault((r["setting"], tuple(arms), r["metric"]), {})
                for seed, value in zip(r["seeds"], values, strict=True):
                    if side.setdefault(seed, value) != value:
                        raise ValueError(
                            f"{r['setting']} / {arms} / seed {seed}: two values in the prior analysis"
                        )
    return sides


def rows_from_sides(sides: Sides) -> list[dict]:
    """Rows of the arms that are a whole side of a contrast, sorted like ``read_runs``'s and marked
    ``recovered``: ``setting``, ``arm``, ``seed`` and the metrics the sides hold; the other ``METRICS``,
    ``run_id`` and ``wall_s`` are None."""
    rows: dict[tuple[str, str, int], dict] = {}
    for (setting, arms, metric), values in sides.items():
        if len(arms) != 1:
            continue
        for seed, value in values.items():
            row = rows.setdefault(
                (setting, arms[0], seed),
                {"setting": setting, "arm": arms[0], "seed": seed, "run_id": None, "wall_s": None}
                | dict.fromkeys(METRICS)
                | {"recovered": True},
            )
            row[metric] = value
    return [rows[k] for k in sorted(rows)]
