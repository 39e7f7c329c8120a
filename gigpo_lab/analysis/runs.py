"""Which runs ``gigpo-lab compare`` reads from MLflow, and what it keeps of each.

By default compare works on **one sweep**: the one given with ``--sweep`` (its parent run id or its
``sweep_id`` tag), else the latest sweep parent run of ``--experiment`` (or of the whole store). Runs of
several sweeps are pooled only with ``--all-sweeps``. An experiment without any sweep is compared as the set
of its single runs. The lab's conventions are read: a sweep's parent run carries the tag
``gigpo_lab.role = sweep-parent`` and ``sweep_id``; its jobs carry ``mlflow.parentRunId`` and ``sweep_id``
(``tracking/sweep.py``); every run carries the flattened resolved config as params, and the tags
``estimator``, ``step_advantage_weight`` (ω, gigpo-family), ``env``, ``model``, ``seed`` (``run_tags.py``).

Reads: one paged ``search_runs`` (params, tags, final metric values), then ``get_metric_history`` of two
keys per finished run: the compared metric and ``eval/env_steps_total`` (the curves' x axis). The compared
metric is ``eval/final`` where the runs logged it, else ``eval/success_rate`` (``default_metric``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from gigpo_lab.tracking.mlflow_tracker import sqlite_file
from gigpo_lab.tracking.sweep_env import ROLE_TAG
from gigpo_lab.tracking.sweep_resume import latest_runs

#: A run's mean sampled success over its last evaluations (training/evaluation.py): compare's default metric.
PRIMARY_METRIC = "eval/final"
DEFAULT_METRIC = "eval/success_rate"  # compare's metric for runs that predate eval/final
EVAL_STEPS = "eval/env_steps_total"  # cumulative training env steps at each eval: the curves' x axis
ROLLOUT_STEPS = "rollout/env_steps_total"  # env steps a run used, from its final value
PARENT_ROLE = "sweep-parent"  # the ROLE_TAG value of a sweep's parent run (tracking/sweep.py)
_RUN_ID = re.compile(r"[0-9a-f]{32}")


def store_uri(value: str | None) -> str:
    """A tracking URI from ``--store``: a URI as given, a path as ``sqlite:///<abs path>``, None as the default."""
    from gigpo_lab.tracking.mlflow_tracker import default_tracking_uri

    if not value:
        return default_tracking_uri()
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).resolve()}"


@dataclass
class RunRecord:
    """One training run as compare sees it: identity (tags, params), outcome, final values and curves."""

    run_id: str
    name: str
    status: str  # FINISHED, FAILED, KILLED, RUNNING (a crashed process leaves RUNNING behind)
    start_time: int = 0  # ms since the epoch: "the latest run" of a duplicated seed
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)  # the flattened resolved config
    final: dict[str, float] = field(default_factory=dict)  # last logged value of every metric
    history: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> {step: value}

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    @property
    def seed(self) -> str:
        return self.tags.get("seed", self.params.get("seed", "?"))

    @property
    def estimator(self) -> str:
        return self.tags.get("estimator", self.params.get("estimator._target_", "?").rsplit(".", 1)[-1])

    @property
    def omega(self) -> float | None:
        """ω, the step-advantage weight; None for estimators without one."""
        value = self.tags.get("step_advantage_weight", self.params.get("estimator.step_advantage_weight"))
        try:
            return float(value) if value not in (None, "", "None") else None
        except ValueError:
            return None

    @property
    def env(self) -> str:
        return self.tags.get("env", self.params.get("env.name", "?"))

    @property
    def model(self) -> str:
        return self.tags.get("model", "?")

    @property
    def error(self) -> str | None:
        return self.tags.get("error")

    def points(self, metric: str) -> list[tuple[float, float]]:
        """The metric's finite history as ``(env steps, value)`` in step order (x = the step without env steps)."""
        xs = self.history.get(EVAL_STEPS, {})
        return [
            (xs.get(step, math.nan), value)
            for step, value in sorted(self.history.get(metric, {}).items())
            if math.isfinite(value)
        ]


@dataclass
class Selection:
    """The runs to compare and where they came from."""

    records: list[RunRecord]
    label: str  # the sweep id, or the experiment name when several sweeps (or none) are compared
    experiment: str
    parent_run_id: str | None  # the sweep's parent run, where compare logs its report; None when pooled
    note: str  # how the runs were chosen, for the report
    metric: str = DEFAULT_METRIC  # the compared metric (select_runs: the one asked for, or the default)


def _search_all(client, experiment_ids: list[str], filter_string: str = "", order_by=None) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(
            experiment_ids, filter_string, max_results=1000, page_token=token, order_by=order_by
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _record(run) -> RunRecord:
    return RunRecord(
        run_id=run.info.run_id,
        name=run.info.run_name or run.info.run_id,
        status=run.info.status,
        start_time=int(run.info.start_time or 0),
        tags=dict(run.data.tags),
        params=dict(run.data.params),
        final=dict(run.data.metrics),
    )


def experiment_records(uri: str, experiment: str, filter_string: str = "") -> list[RunRecord]:
    """Every run of one experiment that matches ``filter_string``, with its tags, params and final metric
    values (no histories; ``metric_history`` reads one): the one MLflow reader that ``compare``, ``gigpo-lab
    study`` and the experiment scripts share. ValueError
    names the experiments there when it has none of that name."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return [_record(r) for r in _search_all(client, _experiment_ids(client, uri, experiment), filter_string)]


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """One metric of one run: ``(step, value, timestamp in ms)`` per logged point, in step order."""
    from mlflow.tracking import MlflowClient

    points = MlflowClient(uri).get_metric_history(run_id, key)
    return [
        (int(m.step), float(m.value), int(m.timestamp))
        for m in sorted(points, key=lambda m: (m.step, m.timestamp))
    ]


def _is_parent(run) -> bool:
    return run.data.tags.get(ROLE_TAG) == PARENT_ROLE


def _find_sweep(client, experiment_ids: list[str], sweep: str):
    """The parent run of a sweep given by its run id or its ``sweep_id`` tag; ValueError names the choices."""
    if _RUN_ID.fullmatch(sweep):
        from mlflow.exceptions import MlflowException

        try:
            run = client.get_run(sweep)
        except MlflowException:
            run = None
        if run is not None and _is_parent(run):
            return run
        if run is not None:
            raise ValueError(f"run {sweep} is not a sweep's parent run (no tag {ROLE_TAG}={PARENT_ROLE})")
    if "'" in sweep:
        raise ValueError(f"sweep {sweep!r} must not contain a quote")
    parents = [r for r in _search_all(client, experiment_ids, f"tags.sweep_id = '{sweep}'") if _is_parent(r)]
    if parents:
        return max(parents, key=lambda r: r.info.start_time or 0)
    known = _parents(client, experiment_ids)[:8]
    listed = ", ".join(r.data.tags.get("sweep_id", r.info.run_id) for r in known) or "none"
    raise ValueError(f"no sweep {sweep!r} (a sweep id or parent run id); latest sweeps there: {listed}")


def _parents(client, experiment_ids: list[str]) -> list:
    """Sweep parent runs, latest first."""
    found = _search_all(
        client,
        experiment_ids,
        f"tags.`{ROLE_TAG}` = '{PARENT_ROLE}'",
        order_by=["attributes.start_time DESC"],
    )
    return sorted(found, key=lambda r: r.info.start_time or 0, reverse=True)


def _experiment_ids(client, uri: str, experiment: str | None) -> list[str]:
    if experiment is None:
        return [e.experiment_id for e in client.search_experiments()]
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise ValueError(f"no experiment {experiment!r} in {uri}; experiments there: {', '.join(names)}")
    return [exp.experiment_id]


def default_metric(records: list[RunRecord]) -> str:
    """``eval/final`` when a finished run logged it, else ``eval/success_rate`` (runs from before eval/final)."""
    return PRIMARY_METRIC if any(PRIMARY_METRIC in r.final for r in records if r.finished) else DEFAULT_METRIC


def check_metric(records: list[RunRecord], metric: str) -> None:
    """ValueError naming close matches when no finished run logged ``metric`` (a typo'd ``--metric``)."""
    import difflib

    finished = [r for r in records if r.finished]
    if not finished or any(metric in r.final for r in finished):
        return
    keys = sorted(set().union(*(r.final for r in finished)))
    close = difflib.get_close_matches(metric, keys, n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    evals = ", ".join(k for k in keys if k.startswith("eval/"))
    raise ValueError(f"no finished run logged the metric {metric!r}; {hint}(eval metrics: {evals})")


def select_runs(
    uri: str,
    *,
    experiment: str | None = None,
    sweep: str | None = None,
    all_sweeps: bool = False,
    metric: str | None = None,
) -> Selection:
    """The training runs to compare (sweep parents left out), with the histories of ``metric``.

    ``metric`` None: ``default_metric`` of the runs; ``Selection.metric`` says which.

    Raises ``ValueError`` with the fix when nothing matches.
    """
    if (path := sqlite_file(uri)) is not None and not path.is_file():
        raise ValueError(
            f"no MLflow store at {uri}; pass --store <sqlite:///path/mlflow.db or http://host:port>"
        )
    if all_sweeps and (experiment is None or sweep is not None):
        raise ValueError(
            "--all-sweeps pools every run of one experiment: pass --experiment NAME, not --sweep"
        )
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    ids = _experiment_ids(client, uri, experiment)
    where = f"experiment {experiment!r}" if experiment is not None else f"store {uri}"
    parent = _find_sweep(client, ids, sweep) if sweep is not None else None
    if parent is None and not all_sweeps:
        parents = _parents(client, ids)
        parent = parents[0] if parents else None
        if parent is None and experiment is None:
            raise ValueError(
                f"no sweep in {uri}; pass --experiment NAME to compare an experiment's single runs"
            )
        others = len(parents) - 1
        note = (
            f"the latest sweep of {where}"
            + (f" ({others} older there: --sweep ID picks one, --all-sweeps pools them)" if others else "")
            if parent is not None
            else f"the single runs of {where} (it has no sweep)"
        )
    else:
        note = f"sweep {sweep}" if parent is not None else f"every run of {where}, all sweeps pooled"
    if parent is not None:
        ids = [parent.info.experiment_id]
        runs = _search_all(client, ids, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    else:
        runs = [r for r in _search_all(client, ids) if not _is_parent(r)]
    exp_name = experiment or client.get_experiment(ids[0]).name
    label = parent.data.tags.get("sweep_id", parent.info.run_id) if parent is not None else exp_name
    records = [_record(r) for r in latest_runs(runs)]  # a job a resumed sweep ran again: its latest run
    if not records:
        raise ValueError(f"no training runs in {note} of {uri}")
    metric = metric or default_metric(records)
    check_metric(records, metric)
    for rec in records:
        if rec.finished:
            for key in dict.fromkeys((metric, EVAL_STEPS)):
                points = sorted(
                    client.get_metric_history(rec.run_id, key), key=lambda m: (m.step, m.timestamp)
                )
                rec.history[key] = {int(m.step): float(m.value) for m in points}
    parent_id = parent.info.run_id if parent is not None else None
    return Selection(records, label, exp_name, parent_id, note, metric)
