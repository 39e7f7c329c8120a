"""``gigpo-lab compare``: one row per configuration (mean ± std and 95% CI over seeds) and plots, from MLflow.

A *configuration* is (estimator, ω) plus env and model where the compared runs differ in them; the seeds
of a configuration are its finished runs. Runs are read with the lab's conventions (``train`` and the sweep
callback): tags ``estimator``, ``step_advantage_weight`` (ω, gigpo-family only), ``env``, ``model``,
``seed``, ``sweep_id``, ``mlflow.parentRunId``; the sweep's parent run carries ``gigpo_lab.role`` and is
not a configuration. Every run that did not finish (FAILED, KILLED, or left RUNNING by a crashed process)
is counted and listed in its row, never dropped; a configuration whose runs all failed still gets a row.

Reads: one paged ``search_runs`` gives every run's final metric values; ``get_metric_history`` (two keys
per finished run: the compared metric and ``eval/env_steps_total``) gives the learning curves.
Writes ``<out>/compare.md`` and PNG plots (``plots.py``), and logs them under ``compare/`` on the sweep's
parent run when the compared runs share one.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gigpo_lab.tracking.plots import EVAL_STEPS
from gigpo_lab.tracking.stats import Summary, summarize_values

DEFAULT_METRIC = "eval/success_rate"
RETURN_METRIC = "eval/return"
ROLLOUT_STEPS = "rollout/env_steps_total"  # env steps a run used, from its final value


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
    """One training run as compare sees it: identity, outcome, final metric values and curve histories."""

    run_id: str
    name: str
    status: str  # FINISHED, FAILED, KILLED, RUNNING (a crashed process leaves RUNNING behind)
    estimator: str
    omega: float | None  # ω, the step-advantage weight; None for estimators without one
    env: str
    model: str
    seed: str
    parent_run_id: str | None = None
    error: str | None = None
    final: dict[str, float] = field(default_factory=dict)  # last logged value of every metric
    history: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> {step: value}

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    def key(self) -> tuple:
        return (self.estimator, self.omega, self.env, self.model)

    def best(self, metric: str) -> float:
        """The maximum of the metric's finite history (its final value when no history was read)."""
        values = [v for v in self.history.get(metric, {}).values() if math.isfinite(v)]
        return max(values) if values else self.final.get(metric, math.nan)


@dataclass
class Row:
    """One configuration: its finished seeds' statistics and its failed runs."""

    estimator: str
    omega: float | None
    env: str
    model: str
    runs: list[RunRecord]  # finished
    failed: list[RunRecord]  # every run that did not finish
    final: Summary
    best: Summary
    final_return: Summary
    env_steps: float  # mean final rollout/env_steps_total over the finished seeds

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def all_failed(self) -> bool:
        return not self.runs


def _to_float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _record(run) -> RunRecord:
    tags, params = run.data.tags, run.data.params
    omega = _to_float(tags.get("step_advantage_weight", params.get("estimator.step_advantage_weight")))
    return RunRecord(
        run_id=run.info.run_id,
        name=run.info.run_name or run.info.run_id,
        status=run.info.status,
        estimator=tags.get("estimator", params.get("estimator._target_", "?")),
        omega=omega,
        env=tags.get("env", params.get("env.name", "?")),
        model=tags.get("model", "?"),
        seed=tags.get("seed", params.get("seed", "?")),
        parent_run_id=tags.get("mlflow.parentRunId"),
        error=tags.get("error"),
        final=dict(run.data.metrics),
    )


def _search_all(client, experiment_ids: list[str], filter_string: str = "") -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def load_runs(
    uri: str, experiment: str | None = None, sweep_id: str | None = None, metric: str = DEFAULT_METRIC
) -> list[RunRecord]:
    """The training runs of an experiment or of a sweep (sweep parents left out), with their curves.

    Exactly one of ``experiment`` and ``sweep_id``. Raises ``ValueError`` with the fix when nothing matches.
    """
    if (experiment is None) == (sweep_id is None):
        raise ValueError("pass exactly one of experiment= and sweep_id=")
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        raise ValueError(
            f"no MLflow store at {uri}; pass --store <sqlite:///path/mlflow.db or http://host:port>"
        )
    from mlflow.tracking import MlflowClient

    from gigpo_lab.tracking.sweep import ROLE_TAG

    client = MlflowClient(tracking_uri=uri)
    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            names = sorted(e.name for e in client.search_experiments())
            raise ValueError(f"no experiment {experiment!r} in {uri}; experiments there: {', '.join(names)}")
        runs = _search_all(client, [exp.experiment_id])
    else:
        if "'" in sweep_id:
            raise ValueError(f"sweep id {sweep_id!r} must not contain a quote")
        ids = [e.experiment_id for e in client.search_experiments()]
        runs = _search_all(client, ids, f"tags.sweep_id = '{sweep_id}'")
    records = [_record(r) for r in runs if r.data.tags.get(ROLE_TAG) != "sweep-parent"]
    if not records:
        what = f"experiment {experiment!r}" if experiment is not None else f"sweep {sweep_id!r}"
        raise ValueError(f"no training runs in {what} of {uri}")
    for rec in records:
        if rec.finished:
            for key in dict.fromkeys((metric, EVAL_STEPS)):
                points = sorted(
                    client.get_metric_history(rec.run_id, key), key=lambda m: (m.step, m.timestamp)
                )
                rec.history[key] = {int(m.step): float(m.value) for m in points}
    records.sort(key=lambda r: (_sort_key(r.key()), r.seed, r.run_id))
    return records


def _sort_key(key: tuple) -> tuple:
    estimator, omega, env, model = key
    return (estimator, omega is not None, omega or 0.0, env, model)


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def summarize(records: Sequence[RunRecord], metric: str = DEFAULT_METRIC) -> list[Row]:
    """One ``Row`` per configuration, sorted by estimator, then ω; stats over the finished seeds only."""
    groups: dict[tuple, list[RunRecord]] = {}
    for rec in records:
        groups.setdefault(rec.key(), []).append(rec)
    rows = []
    for key in sorted(groups, key=_sort_key):
        runs = [r for r in groups[key] if r.finished]
        steps = _finite(r.final.get(ROLLOUT_STEPS) for r in runs)
        rows.append(
            Row(
                *key,
                runs=runs,
                failed=[r for r in groups[key] if not r.finished],
                final=summarize_values(_finite(r.final.get(metric) for r in runs)),
                best=summarize_values(_finite(r.best(metric) for r in runs)),
                final_return=summarize_values(_finite(r.final.get(RETURN_METRIC) for r in runs)),
                env_steps=sum(steps) / len(steps) if steps else math.nan,
            )
        )
    return rows


def report_parent(records: Sequence[RunRecord]) -> str | None:
    """The sweep parent run shared by every record, or None when they have none or several."""
    parents = {r.parent_run_id for r in records}
    return parents.pop() if len(parents) == 1 and None not in parents else None


def varying_columns(rows: Sequence[Row]) -> list[str]:
    """``env`` and/or ``model`` when the rows differ in them (otherwise they are only in the title)."""
    return [col for col in ("env", "model") if len({getattr(r, col) for r in rows}) > 1]


def row_label(row: Row, extra: Sequence[str] = ()) -> str:
    parts = [row.estimator + (f" ω={row.omega:g}" if row.omega is not None else "")]
    return " ".join(parts + [str(getattr(row, col)) for col in extra])


def _mean_std(s: Summary) -> str:
    if s.n == 0:
        return "—"
    return f"{s.mean:.3f}" if s.n < 2 else f"{s.mean:.3f} ± {s.std:.3f}"


def _ci(s: Summary) -> str:
    return "—" if s.n < 2 else f"[{s.ci_low:.3f}, {s.ci_high:.3f}]"


def table(rows: Sequence[Row], metric: str = DEFAULT_METRIC) -> tuple[list[str], list[list[str]]]:
    """The comparison table as header and cells (shared by the Markdown and the terminal versions)."""
    extra = varying_columns(rows)
    header = ["estimator", "ω", *extra, "n", "final", "95% CI", "best", "95% CI", "return", "95% CI"]
    header += ["env steps", "failed"]
    cells = []
    for r in rows:
        failed = "—" if not r.failed else f"{len(r.failed)}" + (" (all: FAILED)" if r.all_failed else "")
        cells.append(
            [r.estimator, "" if r.omega is None else f"{r.omega:g}", *(str(getattr(r, c)) for c in extra)]
            + [str(r.n), _mean_std(r.final), _ci(r.final), _mean_std(r.best), _ci(r.best)]
            + [_mean_std(r.final_return), _ci(r.final_return)]
            + ["—" if math.isnan(r.env_steps) else f"{r.env_steps:.0f}", failed]
        )
    return header, cells


def failed_lines(rows: Sequence[Row]) -> list[str]:
    """One line per run that did not finish: configuration, seed, name, id, status and error."""
    extra = varying_columns(rows)
    lines = []
    for row in rows:
        for rec in row.failed:
            error = (rec.error or "no error tag (crashed or still running?)").splitlines()[0][:300]
            lines.append(
                f"{row_label(row, extra)} seed {rec.seed}: run {rec.name} ({rec.run_id}) {rec.status} — {error}"
            )
    return lines


def to_markdown(rows: Sequence[Row], metric: str = DEFAULT_METRIC, title: str = "", images=()) -> str:
    """The report: title, method note, the table, the failed runs, and links to the plots."""
    header, cells = table(rows, metric)
    esc = [[c.replace("|", "\\|") for c in line] for line in (header, *cells)]
    lines = [f"# Comparison: {title}" if title else "# Comparison", ""]
    lines += [
        f"*final*: the last logged `{metric}` of each run; *best*: its maximum over the run; *return*: the "
        f"last `{RETURN_METRIC}`. Cells are mean ± sample std (n − 1) over the finished seeds (n); "
        "95% CI = mean ± t₀.₉₇₅,ₙ₋₁ · s / √n (Student t). *env steps*: the mean final "
        "`rollout/env_steps_total`. ω is blank for estimators without a step-advantage weight.",
        "",
        "| " + " | ".join(esc[0]) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(line) + " |" for line in esc[1:]),
        "",
    ]
    failed = failed_lines(rows)
    lines += ["## Failed runs", "", *(f"- {f}" for f in failed)] if failed else ["No failed runs."]
    lines += ["", *(f"![{Path(p).stem}]({Path(p).name})" for p in images)]
    return "\n".join(lines).rstrip() + "\n"


def print_table(rows: Sequence[Row], metric: str = DEFAULT_METRIC, title: str = "", file=None) -> None:
    """The table and the failed runs on the terminal (rich); rows whose runs all failed in red."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file)
    if not console.is_terminal:  # piped or redirected: do not squeeze the table into 80 columns
        console.width = 160
    header, cells = table(rows, metric)
    tab = Table(
        title=f"gigpo-lab compare: {title}" if title else "gigpo-lab compare",
        caption=f"final, best: {metric}; return: {RETURN_METRIC}; mean ± std over seeds, 95% t CI",
    )
    for name in header:
        tab.add_column(name, overflow="fold")
    for row, line in zip(rows, cells, strict=True):
        tab.add_row(*line, style="red" if row.all_failed else None)
    console.print(tab)
    for line in failed_lines(rows):
        console.print(f"[red]failed:[/red] {line}", markup=True, highlight=False)


def write_report(
    rows: Sequence[Row],
    out_dir: str | Path,
    *,
    metric: str = DEFAULT_METRIC,
    title: str = "",
    uri: str | None = None,
    parent_run_id: str | None = None,
) -> list[Path]:
    """Write the plots and ``compare.md`` to ``out_dir``; log them under ``compare/`` on ``parent_run_id``."""
    from gigpo_lab.tracking import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = varying_columns(rows)
    curves = [c for r in rows if (c := plots.mean_curve(row_label(r, extra), r.runs, metric)) is not None]
    images = (
        [plots.learning_curves(curves, metric, out / "learning_curves.png", title=title)] if curves else []
    )
    ablation = plots.omega_ablation(rows, metric, out / "omega_ablation.png", extra=extra, title=title)
    images += [ablation] if ablation is not None else []
    md = out / "compare.md"
    md.write_text(to_markdown(rows, metric, title=title, images=images), encoding="utf-8")
    written = [md, *images]
    if parent_run_id is not None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        for path in written:
            client.log_artifact(parent_run_id, str(path), "compare")
    return written


def main(argv: list[str] | None = None) -> int:
    """``gigpo-lab compare (--experiment NAME | --sweep-id ID) [--store URI] [--out DIR] [--metric KEY]``."""
    parser = argparse.ArgumentParser(
        prog="gigpo-lab compare",
        description="Compare configurations over seeds (mean ± std, 95% t CI) and plot learning curves.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", help="MLflow experiment name, e.g. gigpo-step-weight")
    which.add_argument("--sweep-id", help="the sweep_id tag of one multirun (printed when a sweep fails)")
    parser.add_argument("--store", help="tracking URI or sqlite file (default: sqlite:///<cwd>/mlflow.db)")
    parser.add_argument("--out", help="output folder (default: compare/<experiment or sweep id>)")
    parser.add_argument(
        "--metric", default=DEFAULT_METRIC, help=f"metric to compare (default {DEFAULT_METRIC})"
    )
    args = parser.parse_args(argv)
    uri = store_uri(args.store)
    label = args.experiment if args.experiment is not None else args.sweep_id
    try:
        records = load_runs(uri, experiment=args.experiment, sweep_id=args.sweep_id, metric=args.metric)
    except ValueError as err:
        sys.stderr.write(f"gigpo-lab compare: {err}\n")
        return 1
    rows = summarize(records, args.metric)
    shared = [str(getattr(rows[0], col)) for col in ("env", "model") if col not in varying_columns(rows)]
    title = f"{label} ({', '.join(shared)})" if shared else label
    print_table(rows, args.metric, title=title)
    parent = report_parent(records)
    out = Path(args.out) if args.out else Path("compare") / label.replace("/", "_")
    written = write_report(rows, out, metric=args.metric, title=title, uri=uri, parent_run_id=parent)
    where = (
        f"; logged under compare/ on parent run {parent}" if parent else " (no single sweep parent to log to)"
    )
    sys.stdout.write(f"wrote {', '.join(str(p) for p in written)}{where}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
