"""PNG plots for ``gigpo-lab compare``, each with 95% stratified bootstrap CIs (``stats.py``).

- ``learning_curves``: per configuration, the IQM over seeds at equal env steps, with a CI band; one panel
  per env when the comparison spans several;
- ``omega_ablation``: the final metric's IQM against ω, CI whiskers (drawn like the GiGPO paper's figure);
- ``aggregate``: IQM and mean of the final metric per configuration, or per method across envs, as intervals
  (the layout of Agarwal et al. 2021, Fig. 1);
- ``improvement``: the probability of improvement of each configuration over the baseline, 0.5 marked;
- ``profile``: the performance profile, the share of runs scoring ≥ τ, with CI bands.

Percentile-bootstrap intervals of a rate lie in [0, 1], so no whisker is cut at the axis. matplotlib is
imported inside the functions and the figures use the object API on an explicit ``FigureCanvasAgg``: no
pyplot, no global backend switch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gigpo_lab.analysis import stats
from gigpo_lab.analysis.report import is_rate
from gigpo_lab.analysis.runs import RunRecord


@dataclass
class Curve:
    """A configuration's learning curve over its seeds: the IQM and its 95% CI at each point.

    With env steps (the usual case) the curve is sampled at every env-step count at which some seed evaluated,
    from the first count every seed has reached to the smallest final count, each seed holding its latest
    eval value (a step function), so every point has all n seeds. Without env steps the seeds are taken at
    the iterations all of them logged.
    """

    label: str
    x: list[float]  # env steps (or iterations when env_steps is False)
    env_steps: bool
    iqm: list[float]
    low: list[float]
    high: list[float]
    n: int


def _value_at(points: list[tuple[float, float]], x: float) -> float:
    """The latest value of a step function [(env steps, value)] at or before ``x``."""
    return [v for xi, v in points if xi <= x][-1]


def learning_curve(label: str, runs: Sequence[RunRecord], metric: str) -> Curve | None:
    """The seeds' curves aligned at equal env steps, their IQM and stratified bootstrap CI at each point."""
    curves = [r.points(metric) for r in runs]
    if not runs or not all(curves):
        return None
    if all(math.isfinite(x) for c in curves for x, _ in c):
        start, end = max(c[0][0] for c in curves), min(c[-1][0] for c in curves)
        grid = sorted({x for c in curves for x, _ in c if start <= x <= end})
        values = np.array([[_value_at(c, x) for c in curves] for x in grid])  # (points, seeds)
        env_steps = True
    else:
        steps = sorted(set.intersection(*(set(r.history[metric]) for r in runs)))
        grid = [float(s) for s in steps]
        values = np.array([[r.history[metric][s] for r in runs] for s in steps])
        env_steps = False
    if not len(grid):
        return None
    low, high = stats.bootstrap_ci([values], stats.iqm)
    return Curve(label, grid, env_steps, list(stats.iqm(values)), list(low), list(high), len(runs))


def _figure(width: float = 7.0, height: float = 4.5, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def _save(fig, path: str | Path) -> Path:
    out = Path(path)
    fig.savefig(out)
    return out


def _rate_axis(set_lim, metric: str) -> None:
    if is_rate(metric):
        set_lim(-0.03, 1.03)


def learning_curves(
    curves: Sequence[Curve],
    metric: str,
    path: str | Path,
    title: str = "",
    panels: Sequence[str] | None = None,
) -> Path:
    """Every configuration's IQM curve with its 95% bootstrap band. ``panels`` (one name per curve, e.g. its
    env) draws one subplot per distinct name, in first-seen order; without it, one plot of all curves."""
    names = list(dict.fromkeys(panels)) if panels else [""]
    owner = list(panels) if panels else [""] * len(curves)
    use_env_steps = all(c.env_steps for c in curves)
    fig, axes = _figure(width=7.0 if len(names) == 1 else min(4.5 * len(names), 18.0), ncols=len(names))
    for ax, name in zip(axes, names, strict=True):
        for c in (c for c, o in zip(curves, owner, strict=True) if o == name):
            (line,) = ax.plot(c.x, c.iqm, marker="o", markersize=3, label=f"{c.label} (n={c.n})")
            band = [(x, lo, hi) for x, lo, hi in zip(c.x, c.low, c.high, strict=True) if math.isfinite(lo)]
            if band:
                bx, lo, hi = zip(*band, strict=True)
                ax.fill_between(bx, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("training env steps (eval/env_steps_total)" if use_env_steps else "iteration")
        _rate_axis(ax.set_ylim, metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        if name:
            ax.set_title(name, fontsize="medium")
    axes[0].set_ylabel(metric)
    what = f"{metric}: IQM over seeds, 95% bootstrap CI"
    fig.suptitle(f"{title}\n{what}" if title else what, fontsize="medium")
    return _save(fig, path)


def _errors(estimates: Sequence[stats.Estimate]) -> np.ndarray:
    """Asymmetric error bars (2, k) from CIs; 0 where a CI is missing."""
    return np.array(
        [
            [e.value - e.low if e.has_ci else 0.0 for e in estimates],
            [e.high - e.value if e.has_ci else 0.0 for e in estimates],
        ]
    )


def omega_ablation(rows: Sequence, metric: str, path: str | Path, title: str = "") -> Path | None:
    """Final metric (IQM, 95% CI) against ω, one line per configuration label without its ω.

    Returns the PNG's path, or None (nothing written) when fewer than two ω values have a finished run.
    """
    lines: dict[str, list] = {}
    for row in rows:
        if row.config.omega is not None and row.n and math.isfinite(row.iqm.value):
            rest = " ".join(t for t in row.config.tokens if not t.startswith("ω="))
            lines.setdefault(rest, []).append(row)
    omegas = sorted({row.config.omega for group in lines.values() for row in group})
    if len(omegas) < 2:
        return None
    fig, (ax,) = _figure()
    for rest, group in lines.items():
        group = sorted(group, key=lambda r: r.config.omega)
        ax.errorbar(
            [r.config.omega for r in group],
            [r.iqm.value for r in group],
            yerr=_errors([r.iqm for r in group]),
            marker="o",
            capsize=4,
            label=f"{rest} (n={'/'.join(str(r.n) for r in group)})",
        )
    ax.set_xticks(omegas)
    ax.set_xlabel("ω (estimator.step_advantage_weight)")
    ax.set_ylabel(f"final {metric} (IQM)")
    _rate_axis(ax.set_ylim, metric)
    what = "ω ablation: IQM over seeds, 95% bootstrap CI"
    ax.set_title(f"{title}\n{what}" if title else what, fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def _intervals(ax, labels: Sequence[str], estimates: Sequence[stats.Estimate], colors) -> None:
    y = np.arange(len(labels))[::-1]
    for yi, e, color in zip(y, estimates, colors, strict=True):
        if math.isfinite(e.value):
            if e.has_ci:
                ax.barh(yi, e.high - e.low, left=e.low, height=0.6, color=color, alpha=0.35)
            ax.plot([e.value, e.value], [yi - 0.3, yi + 0.3], color=color, linewidth=2)
    ax.set_yticks(y, labels)
    ax.grid(axis="x", alpha=0.3)


def _colors(k: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(k)]


def aggregate(items: Sequence, metric: str, path: str | Path, title: str = "", envs: int = 1) -> Path:
    """IQM and mean of the final metric with 95% CIs, one interval per item (a Row or a MethodRow).

    Args:
        items: ``summary.Row`` or ``summary.MethodRow`` objects (``label``, ``iqm``, ``mean``).
        envs: how many envs each item's statistics are stratified over (for the title).
    """
    labels = [i.label for i in items]
    fig, axes = _figure(width=9.0, height=1.2 + 0.45 * len(items), ncols=2)
    colors = _colors(len(items))
    for ax, name in zip(axes, ("iqm", "mean"), strict=True):
        _intervals(ax, labels, [getattr(i, name) for i in items], colors)
        ax.set_xlabel(f"final {metric}: {name.upper() if name == 'iqm' else name}")
        _rate_axis(ax.set_xlim, metric)
    axes[1].set_yticks([])
    where = f"across {envs} envs (stratified bootstrap)" if envs > 1 else "95% bootstrap CI over seeds"
    fig.suptitle(f"{title}: {where}" if title else where, fontsize="medium")
    return _save(fig, path)


def improvement(items: Sequence, baseline: str, path: str | Path, title: str = "") -> Path | None:
    """P(X > baseline) with its 95% CI per item that has one; None (nothing written) when none has."""
    shown = [i for i in items if math.isfinite(i.poi.value) and not getattr(i, "is_baseline", False)]
    if not shown:
        return None
    labels = [i.label for i in shown]
    fig, (ax,) = _figure(width=7.0, height=1.2 + 0.45 * len(shown))
    _intervals(ax, labels, [i.poi for i in shown], _colors(len(shown)))
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xlim(-0.03, 1.03)
    ax.set_xlabel(f"P(X > {baseline}): probability of improvement")
    what = "probability of improvement, 95% bootstrap CI"
    ax.set_title(f"{title}\n{what}" if title else what, fontsize="medium")
    return _save(fig, path)


def profile(items: Sequence, metric: str, path: str | Path, title: str = "") -> Path | None:
    """The share of runs with final metric ≥ τ against τ, with CI bands, per Row (or per MethodRow, stratified
    over envs); None when no item has a run."""
    shown = [i for i in items if i.n]
    if not shown:
        return None
    scores = np.concatenate([s for i in shown for s in i.strata])
    lo_t, hi_t = (0.0, 1.0) if is_rate(metric) else (float(scores.min()), float(scores.max()))
    taus = np.linspace(lo_t, hi_t, 51)
    fig, (ax,) = _figure()
    for item, color in zip(shown, _colors(len(shown)), strict=True):
        share, low, high = stats.performance_profile(item.strata, taus)
        ax.plot(taus, share, color=color, label=f"{item.label} (n={item.n})")
        if np.isfinite(low).all():
            ax.fill_between(taus, low, high, color=color, alpha=0.15, linewidth=0)
    ax.set_xlabel(f"τ (final {metric})")
    ax.set_ylabel("share of runs ≥ τ")
    ax.set_ylim(-0.03, 1.03)
    what = "performance profile, 95% bootstrap CI" + (
        " (stratified over envs)" if len(shown[0].strata) > 1 else ""
    )
    ax.set_title(f"{title}\n{what}" if title else what, fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)
