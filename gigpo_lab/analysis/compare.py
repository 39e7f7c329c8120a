"""``gigpo-lab compare``: the configurations of one sweep over their seeds, with the field's statistics.

One row per configuration (every setting that differs between the runs, seed aside: ``configs.py``) with
the IQM and mean of the final metric and their 95% stratified bootstrap CIs, the probability of improvement
over a baseline, "solved k/n", the env steps to the threshold and the area under the learning curve
(``summary.py``). By default the runs are those of the latest sweep (``runs.py``). Every run that did not
finish is listed in its row, never dropped; a seed that ran twice in one configuration is counted once, with
a warning.

Writes, with the metric in every file name so that a compare of another metric does not overwrite them:
``compare-<metric>.md``, ``learning_curves-<metric>.png``, ``aggregate-<metric>.png``,
``improvement-<metric>.png``, ``profile-<metric>.png`` and (with two or more ω) ``omega_ablation-<metric>.png``,
and ``per_seed-<metric>.json`` (every arm's value per seed, every contrast's pairs: ``contrasts.per_seed``);
and logs them under ``compare/`` on the sweep's parent run.

Paired contrasts (``contrasts.py``, ``paired.py``): configurations of one env that share seeds are compared
seed by seed, ``--contrast A:B`` (repeatable; default every configuration against ``--baseline``), as one
family (``--family``) with Holm-adjusted p-values, over ``--resamples`` (default 50,000) resamples.

The metric is ``--metric``, by default ``eval/final`` where the runs logged it, else ``eval/success_rate``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gigpo_lab.analysis.contrasts import ContrastSpec, Family, paired_family, per_seed
from gigpo_lab.analysis.paired import RESAMPLES
from gigpo_lab.analysis.runs import DEFAULT_METRIC, PRIMARY_METRIC, Selection, select_runs, store_uri
from gigpo_lab.analysis.summary import DEFAULT_BASELINE, DEFAULT_THRESHOLD, Summary, summarize

__all__ = ["main", "metric_slug", "store_uri", "write_report"]


def metric_slug(metric: str) -> str:
    """``eval/success_rate`` -> ``eval_success_rate``: the metric's part of the output file names."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in metric)


def write_report(
    summary: Summary,
    out_dir: str | Path,
    *,
    title: str = "",
    note: str = "",
    warnings=(),
    uri: str | None = None,
    parent_run_id: str | None = None,
    family: Family | None = None,
) -> list[Path]:
    """Write ``compare-<metric>.md``, ``per_seed-<metric>.json`` and the plots to ``out_dir``; log them under
    ``compare/`` on the parent run."""
    from gigpo_lab.analysis import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slug, metric = metric_slug(summary.metric), summary.metric
    # several envs: one panel per env (named by the label's env words), each curve named by its method
    by_env = len({r.config.task for r in summary.rows}) > 1
    drawn = [
        (c, " ".join(t for t in r.config.tokens if t not in r.config.method) or r.config.label)
        for r in summary.rows
        if (
            c := plots.learning_curve(
                " ".join(r.config.method) if by_env else r.config.label, r.config.finished, metric
            )
        )
    ]
    curves, panels = [c for c, _ in drawn], [p for _, p in drawn]
    path = out / f"learning_curves-{slug}.png"
    images = (
        [plots.learning_curves(curves, metric, path, title, panels if by_env else None)] if curves else []
    )
    finished = [r for r in summary.rows if r.n]
    if summary.methods:
        envs = len(summary.methods[0].rows)
        images.append(plots.aggregate(summary.methods, metric, out / f"aggregate-{slug}.png", title, envs))
    elif finished:
        images.append(plots.aggregate(finished, metric, out / f"aggregate-{slug}.png", title))
    poi_items = summary.methods or summary.rows
    optional = [
        plots.improvement(poi_items, summary.baseline, out / f"improvement-{slug}.png", title),
        plots.profile(poi_items, metric, out / f"profile-{slug}.png", title),
        plots.omega_ablation(summary.rows, metric, out / f"omega_ablation-{slug}.png", title),
    ]
    images += [p for p in optional if p is not None]
    from gigpo_lab.analysis.report import to_markdown

    md = out / f"compare-{slug}.md"
    md.write_text(to_markdown(summary, title, note, warnings, images, family), encoding="utf-8")
    seeds = out / f"per_seed-{slug}.json"
    seeds.write_text(
        json.dumps(per_seed(summary, family), indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    written = [md, seeds, *images]
    if parent_run_id is not None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        for path in written:
            client.log_artifact(parent_run_id, str(path), "compare")
    return written


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gigpo-lab compare",
        description="Compare the configurations of a sweep over their seeds: IQM and mean with 95% stratified "
        "bootstrap CIs, probability of improvement, paired contrasts by seed (Holm-adjusted), solved k/n, env "
        "steps to a threshold, and plots. "
        "Without --experiment or --sweep: the latest sweep of the store.",
    )
    parser.add_argument(
        "--experiment", help="MLflow experiment name; its latest sweep unless --sweep/--all-sweeps"
    )
    parser.add_argument(
        "--sweep",
        "--sweep-id",
        dest="sweep",
        help="a sweep's parent run id or its sweep_id tag (printed by a sweep)",
    )
    parser.add_argument(
        "--all-sweeps", action="store_true", help="pool every run of --experiment, all sweeps together"
    )
    parser.add_argument("--store", help="tracking URI or sqlite file (default: sqlite:///<cwd>/mlflow.db)")
    parser.add_argument("--out", help="output folder (default: compare/<sweep id or experiment>)")
    parser.add_argument(
        "--metric",
        help=f"metric to compare (default {PRIMARY_METRIC} where the runs logged it, else {DEFAULT_METRIC})",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"a seed is solved when its final metric is >= this (default {DEFAULT_THRESHOLD:g})",
    )
    parser.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        help=f"the configuration P(>base) compares to, by words of its label (default {DEFAULT_BASELINE!r}; "
        "e.g. 'gigpo w=0')",
    )
    parser.add_argument(
        "--contrast",
        action="append",
        default=[],
        metavar="A:B",
        help="a paired contrast A vs B, each side words of a label as --baseline (e.g. gigpo:grpo); repeat "
        "for a family (default: every configuration vs the baseline)",
    )
    parser.add_argument(
        "--family", help="the family's name, Holm-corrected together (default 'primary' with --contrast)"
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        help=f"bootstrap resamples and sign flips per contrast (default {RESAMPLES:,}, for published tables; "
        "fewer prints a larger Monte-Carlo error)",
    )
    parser.add_argument(
        "--wide", action="store_true", help="every column on the terminal (default: 100 columns)"
    )
    return parser


def _title(selection: Selection, summary: Summary) -> str:
    shared = [
        str(getattr(summary.rows[0].config, col))
        for col in ("env", "model")
        if len({getattr(r.config, col) for r in summary.rows}) == 1
    ]
    return f"{selection.label} ({', '.join(shared)})" if shared else selection.label


def main(argv: list[str] | None = None) -> int:
    """``gigpo-lab compare [--experiment NAME] [--sweep ID | --all-sweeps] [--metric KEY] [--contrast A:B …]``."""
    from gigpo_lab.analysis.configs import group_configs
    from gigpo_lab.analysis.report import print_table

    args = _parser().parse_args(argv)
    uri = store_uri(args.store)
    try:
        selection = select_runs(
            uri, experiment=args.experiment, sweep=args.sweep, all_sweeps=args.all_sweeps, metric=args.metric
        )
        configs, warnings = group_configs(selection.records)
        summary = summarize(configs, selection.metric, threshold=args.threshold, baseline=args.baseline)
        specs = [ContrastSpec.parse(text) for text in args.contrast]
        family = paired_family(summary, specs, name=args.family, resamples=args.resamples)
    except ValueError as err:
        sys.stderr.write(f"gigpo-lab compare: {err}\n")
        return 1
    for warning in warnings:
        sys.stderr.write(f"gigpo-lab compare: WARNING: {warning}\n")
    title = _title(selection, summary)
    sys.stdout.write(f"comparing {selection.note}: {len(selection.records)} runs\n")
    print_table(summary, title, wide=args.wide, family=family)
    out = Path(args.out) if args.out else Path("compare") / selection.label.replace("/", "_")
    written = write_report(
        summary,
        out,
        title=title,
        note=selection.note,
        warnings=warnings,
        uri=uri,
        parent_run_id=selection.parent_run_id,
        family=family,
    )
    where = (
        f"; logged under compare/ on the sweep's parent run {selection.parent_run_id}"
        if selection.parent_run_id
        else " (several sweeps or none: no parent run to log to)"
    )
    sys.stdout.write(f"wrote {out}/: {', '.join(p.name for p in written)}{where}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
