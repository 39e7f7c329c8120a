"""PNG plots for ``gigpo-lab compare``: learning curves and the ω ablation, drawn with matplotlib's Agg canvas.

``mean_curve`` averages the seeds' curves at equal env steps (pure Python, testable without matplotlib).
matplotlib is imported inside the functions (so ``compare``'s table costs nothing of it), and the figures
are built with the object API on an explicit ``FigureCanvasAgg``: no pyplot, no global backend switch,
safe in a headless process or next to a notebook's own backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gigpo_lab.tracking.stats import summarize_values

EVAL_STEPS = "eval/env_steps_total"  # cumulative training env steps at each eval: the curves' x axis


@dataclass
class Curve:
    """A configuration's mean learning curve over its seeds.

    With env steps (the usual case) the curve is sampled at every env-step count at which some seed
    evaluated, up to the smallest final count over seeds, each seed holding its latest eval value (a step
    function), so seeds that evaluate at different env steps are averaged at equal env steps and every point
    has all n seeds. Without env steps, the seeds are averaged at the iterations all of them logged.
    """

    label: str
    steps: list[int]  # iteration of each point (the eval step; with env steps: the point's index)
    env_steps: list[float] | None  # the x of each point; None if a seed lacks eval/env_steps_total
    mean: list[float]
    std: list[float]  # sample std over seeds (NaN with one seed)
    n: int


def _value_at(history: dict[float, float], x: float) -> float:
    """The latest value of a step function {env_steps: value} at or before ``x``."""
    return history[max(k for k in history if k <= x)]


def mean_curve(label: str, runs: Sequence, metric: str, x_key: str = EVAL_STEPS) -> Curve | None:
    """Average the seeds' curves at equal env steps (or at equal iterations when env steps are missing).

    Args:
        runs: the finished seeds, each with ``history: {metric: {step: value}}`` (``compare.RunRecord``).
        x_key: the cumulative env-step metric logged with each eval.
    """
    if not runs or any(not r.history.get(metric) for r in runs):
        return None
    have_x = all(set(r.history[metric]) <= set(r.history.get(x_key, {})) for r in runs)
    if not have_x:
        steps = sorted(set.intersection(*(set(r.history[metric]) for r in runs)))
        summaries = [summarize_values([r.history[metric][s] for r in runs]) for s in steps]
        return Curve(label, steps, None, [m.mean for m in summaries], [m.std for m in summaries], len(runs))
    by_x = [{r.history[x_key][s]: v for s, v in r.history[metric].items()} for r in runs]
    end = min(max(h) for h in by_x)
    start = max(min(h) for h in by_x)  # every seed has a value from here on
    grid = sorted({x for h in by_x for x in h if start <= x <= end})
    summaries = [summarize_values([_value_at(h, x) for h in by_x]) for x in grid]
    return Curve(
        label,
        list(range(len(grid))),
        grid,
        [m.mean for m in summaries],
        [m.std for m in summaries],
        len(runs),
    )


def _figure(width: float = 7.0, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _rate_axis(ax, metric: str) -> None:
    if metric.endswith("_rate"):  # success_rate, invalid_rate: fractions in [0, 1]
        ax.set_ylim(-0.03, 1.03)


def learning_curves(curves: Sequence, metric: str, path: str | Path, title: str = "") -> Path:
    """Every configuration's mean curve on one figure, with a ±1 sample-std band over seeds (n ≥ 2).

    Args:
        curves: ``Curve`` objects from ``mean_curve``.
        metric: the y metric, e.g. ``eval/success_rate``.
        path: the PNG to write.

    The x axis is ``eval/env_steps_total`` (training env steps at each eval) when every curve has it, else
    the iteration.
    """
    use_env_steps = all(c.env_steps is not None for c in curves)
    fig, ax = _figure()
    for curve in curves:
        x = curve.env_steps if use_env_steps else curve.steps
        (line,) = ax.plot(x, curve.mean, marker="o", markersize=3, label=f"{curve.label} (n={curve.n})")
        band = [(xi, m, s) for xi, m, s in zip(x, curve.mean, curve.std, strict=True) if math.isfinite(s)]
        if band:
            bx, bm, bs = zip(*band, strict=True)
            lo = [m - s for m, s in zip(bm, bs, strict=True)]
            hi = [m + s for m, s in zip(bm, bs, strict=True)]
            ax.fill_between(bx, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("training env steps (eval/env_steps_total)" if use_env_steps else "iteration")
    ax.set_ylabel(metric)
    _rate_axis(ax, metric)
    ax.set_title(f"{title}: {metric}, mean ± std over seeds" if title else f"{metric}, mean ± std over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out = Path(path)
    fig.savefig(out)
    return out


def omega_ablation(rows: Sequence, metric: str, path: str | Path, extra: Sequence[str] = (), title: str = ""):
    """Final metric vs ω with 95% Student-t CI error bars, one line per (estimator, varying env/model).

    Drawn like the GiGPO paper's step-advantage-weight figure. Returns the PNG's path, or None (nothing
    written) when fewer than two ω values have a finished run.

    Args:
        rows: ``compare.Row`` objects; those with ω and at least one finished seed are drawn.
        extra: the row columns (``env``, ``model``) that distinguish lines.
    """
    lines: dict[tuple, list] = {}
    for row in rows:
        if row.omega is not None and row.n > 0 and math.isfinite(row.final.mean):
            lines.setdefault((row.estimator, *(getattr(row, c) for c in extra)), []).append(row)
    omegas = sorted({row.omega for group in lines.values() for row in group})
    if len(omegas) < 2:
        return None
    fig, ax = _figure()
    for key, group in lines.items():
        group = sorted(group, key=lambda r: r.omega)
        errors = [r.final.half_width if r.final.n >= 2 else 0.0 for r in group]
        ax.errorbar(
            [r.omega for r in group],
            [r.final.mean for r in group],
            yerr=errors,
            marker="o",
            capsize=4,
            label=" ".join(map(str, key)) + f" (n={'/'.join(str(r.n) for r in group)})",
        )
    ax.set_xticks(omegas)
    ax.set_xlabel("ω (estimator.step_advantage_weight)")
    ax.set_ylabel(f"final {metric}")
    _rate_axis(ax, metric)
    ax.set_title(f"{title}: ω ablation, mean and 95% CI over seeds" if title else "ω ablation, 95% CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out = Path(path)
    fig.savefig(out)
    return out
