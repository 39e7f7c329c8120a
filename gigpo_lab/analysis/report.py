"""``gigpo-lab compare``'s tables: the terminal table (100 columns; ``--wide`` for every column) and compare-<metric>.md.

Every column follows ``--metric``. Terminal cells hold a point estimate over its 95% CI (two lines); the
Markdown cells hold ``value [low, high]`` on one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gigpo_lab.analysis.contrasts import INTERVAL, TEST, Family
from gigpo_lab.analysis.stats import Estimate
from gigpo_lab.analysis.summary import MethodRow, Row, Summary

TERMINAL_WIDTH = 100


#: The run's primary metrics (``gigpo_lab/training/evaluation.py``): a mean success and an area normalised by
#: its span, both fractions in [0, 1].
UNIT_METRICS = ("eval/final", "eval/auc")


def is_rate(metric: str) -> bool:
    """Rates (success_rate, invalid_rate) and the primary metrics are fractions in [0, 1]: fixed axes, profile
    levels in [0, 1]."""
    return metric.endswith("_rate") or metric in UNIT_METRICS


def num(v: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}" if abs(v) < 1e4 else f"{v:.3g}"


def _bound(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 100 else num(v)


def count(v: float) -> str:
    """Env steps, short: 980, 12.3k, 1.23M."""
    if not math.isfinite(v):
        return "—"
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.0f}"


def cell(e: Estimate, terminal: bool) -> str:
    """``0.812`` over ``0.70–0.90`` on a terminal; ``0.812 [0.700, 0.900]`` in Markdown; no CI below 2 runs."""
    if not math.isfinite(e.value):
        return "—"
    if not e.has_ci:
        return num(e.value)
    if terminal:
        return f"{num(e.value)}\n{_bound(e.low)}–{_bound(e.high)}"
    return f"{num(e.value)} [{num(e.low)}, {num(e.high)}]"


def _poi(row: Row | MethodRow, terminal: bool) -> str:
    return "baseline" if row.is_baseline else cell(row.poi, terminal)


def _failed(row: Row) -> str:
    failed = row.config.failed
    return "—" if not failed else f"{len(failed)}" + (" (all)" if row.all_failed else "")


def table(
    summary: Summary, *, terminal: bool = False, wide: bool = True
) -> tuple[list[str], list[list[str]]]:
    """Header and cells; ``wide=False`` keeps the columns that fit 100 terminal columns."""
    thr = f"{summary.threshold:g}"
    nl = "\n" if terminal else " "
    has_poi = any(r.is_baseline for r in summary.rows)
    has_failed = any(r.config.failed for r in summary.rows)
    columns = [
        ("configuration", lambda r: r.config.label),
        ("n", lambda r: str(r.n)),
        (f"solved{nl}≥{thr}", lambda r: f"{r.solved}/{r.n}"),
        (f"steps to{nl}≥{thr}", lambda r: count(r.steps_to_threshold)),
        (f"IQM{nl}95% CI", lambda r: cell(r.iqm, terminal)),
        (f"mean{nl}95% CI", lambda r: cell(r.mean, terminal)),
    ]
    columns += [(f"P(>base){nl}95% CI", lambda r: _poi(r, terminal))] if has_poi else []
    columns += [("AUC", lambda r: cell(r.auc, terminal and wide) if wide else num(r.auc.value))]
    if wide:
        columns += [
            ("best", lambda r: num(r.best.value)),
            ("env steps", lambda r: count(r.env_steps)),
            ("seeds", lambda r: ",".join(sorted((x.seed for x in r.config.finished), key=_seed_order))),
        ]
    columns += [("failed", _failed)] if has_failed or wide else []
    header = [name for name, _ in columns]
    return header, [[get(r) for _, get in columns] for r in summary.rows]


def _seed_order(seed: str) -> tuple:
    return (0, int(seed), "") if seed.isdigit() else (1, 0, seed)


def method_table(summary: Summary, terminal: bool = False) -> tuple[list[str], list[list[str]]]:
    """Across envs: one row per method, its statistics stratified over the envs."""
    nl = "\n" if terminal else " "
    header = ["method", "envs", "n", f"IQM{nl}95% CI", f"mean{nl}95% CI", f"P(>base){nl}95% CI"]
    cells = [
        [
            m.label,
            str(len(m.rows)),
            str(m.n),
            cell(m.iqm, terminal),
            cell(m.mean, terminal),
            _poi(m, terminal),
        ]
        for m in summary.methods
    ]
    return header, cells


def effect(d_z: float) -> str:
    """d_z to 3 decimals; ±∞ when every paired difference is the same non-zero value."""
    return num(d_z) if not math.isinf(d_z) else f"{'−' if d_z < 0 else ''}∞"


def p_value(p: float) -> str:
    return f"{p:.3g}" if math.isfinite(p) else "—"


def paired_table(family: Family, terminal: bool = False) -> tuple[list[str], list[list[str]]]:
    """One row per contrast A vs B: pairs, mean difference, paired P(A > B), d_z, raw and Holm p."""
    nl = "\n" if terminal else " "
    header = ["contrast A vs B", "pairs", f"mean A−B{nl}95% CI", f"P(A>B){nl}95% CI", "d_z", "p", "p Holm"]
    header += [] if terminal else ["MC error: CI, p"]
    cells = []
    for c in family.contrasts:
        r = c.result
        line = [
            c.label,
            str(r.n),
            cell(Estimate(r.mean_difference, r.mean_low, r.mean_high), terminal),
            cell(Estimate(r.improvement, r.improvement_low, r.improvement_high), terminal),
            effect(r.d_z),
            p_value(r.p_value) + ("" if r.exact else "*"),
            p_value(c.p_holm),
        ]
        cells.append(line if terminal else [*line, f"{r.ci_mc_error:.2g}, {r.p_mc_error:.2g}"])
    return header, cells


def paired_heading(family: Family) -> str:
    """What the paired table holds: the family, its test, its correction and the resamples with their error."""
    results = [c.result for c in family.contrasts]
    ci_error = max((r.ci_mc_error for r in results), default=0.0)
    p_error = max((r.p_mc_error for r in results), default=0.0)
    return (
        f"paired contrasts, family {family.name!r} (Holm over {len(results)}): p from a {TEST}, "
        f"exact where 2^pairs <= resamples (* = Monte-Carlo); 95% CIs by {INTERVAL}; {family.resamples:,} "
        f"resamples, Monte-Carlo error (1 SE) <= {ci_error:.2g} on a CI endpoint, <= {p_error:.2g} on a p"
    )


def paired_markdown(family: Family) -> list[str]:
    """The paired section of compare-<metric>.md."""
    m = f"`{family.metric}`"
    lines = [
        f"## Paired contrasts: family {family.name!r}",
        "",
        f"Each contrast pairs the seeds that finished in both arms (the same training env seeds and evaluation "
        f"episodes). *mean A−B*: the mean over seeds of A's final {m} minus B's. *P(A>B)*: the share of seeds "
        "on which A beats B, ties half (rliable's probability of improvement, paired). *d_z*: Cohen's d_z, the "
        "mean difference over its standard deviation (no Hedges correction). *p*: two-sided; *p Holm*: "
        "Holm-adjusted over the family. The per-seed values are in per_seed-<metric>.json.",
        "",
        paired_heading(family) + ".",
        "",
    ]
    lines += [*_md_table(*paired_table(family)), ""] if family.contrasts else ["No contrast had pairs.", ""]
    lines += [f"- {n}" for n in family.notes] + ([""] if family.notes else [])
    return lines


def profile_levels(summary: Summary) -> list[float]:
    """The levels τ of the performance profile: 0…1 for a rate, else 0–100% of the scores' range."""
    if is_rate(summary.metric):
        return [0.2, 0.4, 0.6, 0.8, 1.0]
    scores = np.concatenate([r.scores for r in summary.rows] or [np.zeros(0)])
    if not len(scores):
        return []
    return [float(v) for v in np.linspace(scores.min(), scores.max(), 5)]


def failed_lines(summary: Summary) -> list[str]:
    """One line per run that did not finish: configuration, seed, name, id, status and error."""
    lines = []
    for row in summary.rows:
        for rec in row.config.failed:
            error = (rec.error or "no error tag (crashed or still running?)").splitlines()[0][:300]
            lines.append(
                f"{row.config.label} seed {rec.seed}: run {rec.name} ({rec.run_id}) {rec.status} — {error}"
            )
    return lines


def _md_table(header: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    esc = [[c.replace("|", "\\|") for c in line] for line in (header, *cells)]
    return [
        "| " + " | ".join(esc[0]) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(line) + " |" for line in esc[1:]),
    ]


def to_markdown(
    summary: Summary, title: str = "", note: str = "", warnings=(), images=(), family: Family | None = None
) -> str:
    """compare-<metric>.md: title, method, the table (every column), across envs, paired contrasts, profile,
    warnings, failures, plots."""
    from gigpo_lab.analysis.stats import performance_profile

    m, thr = f"`{summary.metric}`", f"{summary.threshold:g}"
    lines = [f"# Comparison: {title}" if title else "# Comparison", ""]
    lines += [f"Runs: {note}.", ""] if note else []
    lines += [
        f"Metric {m}. *IQM*, *mean*: of each finished seed's final {m}, with a 95% stratified bootstrap CI "
        "(percentile, 2000 resamples; Agarwal et al. 2021). *P(>base)*: probability that a run of the row "
        f"beats a run of the baseline ({summary.baseline!r}), ties half, with CI. *solved*: seeds with final "
        f"≥ {thr}; *steps to ≥ {thr}*: median `eval/env_steps_total` at the first eval ≥ {thr}, over the seeds "
        f"that reached it. *AUC*: a run's mean {m} over its eval points, mean over seeds. *best*: a run's "
        "maximum, mean over seeds. *env steps*: mean final `rollout/env_steps_total`. A configuration is "
        "every setting that differs between the runs, seed aside.",
        "",
        *_md_table(*table(summary)),
        "",
    ]
    if summary.methods:
        lines += ["## Across envs (stratified by env)", "", *_md_table(*method_table(summary)), ""]
    lines += paired_markdown(family) if family is not None else []
    levels = profile_levels(summary)
    if levels and any(r.n for r in summary.rows):
        lines += [f"## Performance profile: share of runs with final {m} ≥ τ", ""]
        header = ["configuration", *(f"τ={t:.4g}" for t in levels)]
        cells = []
        for row in summary.rows:
            share, low, high = performance_profile([row.scores], levels)
            cells.append(
                [row.config.label]
                + [
                    cell(Estimate(float(s), float(lo), float(hi)), False)
                    for s, lo, hi in zip(share, low, high, strict=True)
                ]
            )
        lines += [*_md_table(header, cells), ""]
    lines += ["## Notes", "", *(f"- {n}" for n in summary.notes), ""] if summary.notes else []
    lines += ["## Warnings", "", *(f"- **{w}**" for w in warnings), ""] if warnings else []
    failed = failed_lines(summary)
    lines += ["## Failed runs", "", *(f"- {f}" for f in failed)] if failed else ["No failed runs."]
    lines += ["", *(f"![{p.stem}]({p.name})" for p in images)]
    return "\n".join(lines).rstrip() + "\n"


def print_table(
    summary: Summary, title: str = "", *, wide: bool = False, file=None, family: Family | None = None
) -> None:
    """The table (the across-envs table, the paired contrasts) on the terminal; 100 columns unless ``wide``."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=file, highlight=False)
    if wide:
        console.width = max(console.width, 200) if console.is_terminal else 200
    else:
        console.width = min(console.width, TERMINAL_WIDTH) if console.is_terminal else TERMINAL_WIDTH

    def show(header, cells, heading, rows=None):
        console.print(heading, markup=False)
        tab = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for i, name in enumerate(header):
            tab.add_column(name, overflow="fold", justify="left" if i == 0 else "right")
        for i, line in enumerate(cells):
            tab.add_row(*line, style="red" if rows is not None and rows[i].all_failed else None)
        console.print(tab)

    heading = f"gigpo-lab compare: {title}" if title else "gigpo-lab compare"
    show(*table(summary, terminal=True, wide=wide), f"{heading} · final {summary.metric}", summary.rows)
    if summary.methods:
        show(*method_table(summary, terminal=True), f"across envs (stratified) · final {summary.metric}")
    if family is not None and family.contrasts:
        show(*paired_table(family, terminal=True), paired_heading(family))
    for note in family.notes if family is not None else []:
        console.print(f"note: {note}", markup=False)
    for note in summary.notes:
        console.print(f"note: {note}", markup=False)
    for line in failed_lines(summary):
        console.print(Text.assemble(("failed: ", "red"), line))
