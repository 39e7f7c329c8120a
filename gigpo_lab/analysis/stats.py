"""Statistics over seeds for ``gigpo-lab compare``: the estimators of Agarwal et al. 2021, "Deep RL at the Edge
of the Statistical Precipice" (NeurIPS), and of its library rliable, computed with ``scipy.stats.bootstrap``.

- **IQM**, the interquartile mean: the mean of the middle 50% of the runs' scores (``scipy.stats.trim_mean``
  cutting 25% at each end, as rliable's ``aggregate_iqm``). Robust to a lucky or a collapsed seed, more
  efficient than the median.
- **Stratified bootstrap CI**: each task (env) is a stratum; a resample draws n runs with replacement *within
  each stratum*, independently, and recomputes the statistic over all strata (rliable's
  ``StratifiedBootstrap``). The 95% CI is the 2.5th and 97.5th percentile of ``REPS`` resamples (percentile
  method), so the CI of a statistic of values in [0, 1] (a rate) stays inside [0, 1].
- **Probability of improvement** P(X > Y): the chance that a run of X scores higher than a run of Y, ties
  counting half (the Mann-Whitney U statistic over n·m, averaged over tasks). 0.5 = no difference.
- **Performance profile**: the share of runs whose score is ≥ τ, for each level τ (rliable uses > τ; ≥ makes
  the profile at the success threshold equal the "solved k/n" count of compare's table).

Why not rliable itself: rliable 1.2.0 (the latest release) requires ``arch<8``; arch 7.2.0 fails to import
with the lab's pandas 3.1 (``TypeError: deprecate_kwarg() missing 1 required positional argument``), and
downgrading pandas under the other packages is not an option. The estimators are a few lines each on top of
scipy's maintained bootstrap, checked against rliable's definitions in ``tests/analysis/test_stats.py``.

Shapes: a *stratum* holds the scores of one task's runs, ``(n,)``; a configuration's data is a list of strata
(one per env). Statistic functions reduce the last axis and keep leading axes, so they accept scipy's
batched resamples ``(..., B, n)``. A stratum of one run cannot be resampled and is held fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Bootstrap resamples per interval of the per-configuration table (rliable's get_interval_estimates defaults to
#: 50,000, which the paired contrasts use: ``paired.RESAMPLES``; 2,000 keeps the many per-row and per-curve-point
#: intervals quick).
REPS = 2000
LEVEL = 0.95  #: confidence level of every interval
SEED = 0  #: the resampling seed: the same runs give the same report


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its bootstrap CI; ``low``/``high`` are NaN when no stratum has two runs."""

    value: float
    low: float = math.nan
    high: float = math.nan

    @property
    def has_ci(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


NAN = Estimate(math.nan)


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along ``axis``: ``trim_mean(scores, 0.25)``, e.g. IQM([1..8]) = mean(3, 4, 5, 6) = 4.5.

    ``int(0.25 · n)`` values are cut at each end, as in rliable (n = 10: the middle 6).
    """
    from scipy.stats import trim_mean

    return trim_mean(scores, 0.25, axis=axis)


def mean(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(scores, axis=axis)


def _pooled(aggregate: Callable) -> Callable:
    """A statistic over strata: ``aggregate`` of all strata's scores together, e.g. the IQM of every run."""
    return lambda *strata: aggregate(np.concatenate(strata, axis=-1), axis=-1)


def _fixed_like(stratum: np.ndarray, resampled: np.ndarray) -> np.ndarray:
    """A stratum held fixed, broadcast to the batch shape of a resampled one: ``(..., B, n_fixed)``."""
    target = resampled.shape[:-1] + stratum.shape[-1:]
    lead = (1,) * (len(target) - stratum.ndim)
    return np.broadcast_to(stratum.reshape(stratum.shape[:-1] + lead + stratum.shape[-1:]), target)


def bootstrap_ci(strata: Sequence[np.ndarray], statistic: Callable) -> tuple[np.ndarray, np.ndarray]:
    """The ``LEVEL`` percentile-bootstrap CI of ``statistic(*strata)``, resampling runs within each stratum.

    Args:
        strata: per task, the runs' scores ``(..., n_i)``; resampled along the last axis (leading axes, such
            as the points of a learning curve, share the resampled runs).
        statistic: takes the strata (each ``(..., n_i)``) and returns ``(k..., ...)``, reducing the last axis.

    Returns ``(low, high)``, each the statistic's shape; NaN when no stratum has two runs.
    """
    from scipy.stats import bootstrap

    strata = [np.asarray(s, dtype=float) for s in strata]
    moving = [i for i, s in enumerate(strata) if s.shape[-1] >= 2]
    if not moving:
        shape = np.shape(statistic(*strata))
        return np.full(shape, np.nan), np.full(shape, np.nan)

    def resampled_statistic(*drawn, axis=-1):
        full = [_fixed_like(s, drawn[0]) for s in strata]
        for i, d in zip(moving, drawn, strict=True):
            full[i] = d
        return statistic(*full)

    result = bootstrap(
        [strata[i] for i in moving],
        resampled_statistic,
        n_resamples=REPS,
        confidence_level=LEVEL,
        method="percentile",
        vectorized=True,
        axis=-1,
        rng=np.random.default_rng(SEED),
    )
    return np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def interval(strata: Sequence[np.ndarray], statistic: Callable) -> Estimate:
    """Point estimate and stratified bootstrap CI of a scalar statistic of the strata."""
    strata = [np.asarray(s, dtype=float) for s in strata if len(s)]
    if not strata:
        return NAN
    low, high = bootstrap_ci(strata, statistic)
    return Estimate(float(statistic(*strata)), float(low), float(high))


def iqm_estimate(strata: Sequence[np.ndarray]) -> Estimate:
    """The IQM of all runs of all strata, with its stratified bootstrap 95% CI."""
    return interval(strata, _pooled(iqm))


def mean_estimate(strata: Sequence[np.ndarray]) -> Estimate:
    """The mean of all runs of all strata, with its stratified bootstrap 95% CI."""
    return interval(strata, _pooled(mean))


def _improvement(*pairs: np.ndarray) -> np.ndarray:
    """Mean over tasks of P(X > Y) + ½ P(X = Y) over all run pairs; ``pairs`` = x₁, y₁, x₂, y₂, …"""
    per_task = []
    for x, y in zip(pairs[::2], pairs[1::2], strict=True):
        greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
        ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
        per_task.append(greater + 0.5 * ties)
    return np.mean(per_task, axis=0)


def probability_of_improvement(x: Sequence[np.ndarray], y: Sequence[np.ndarray]) -> Estimate:
    """P(X > Y) of configuration X over Y with its CI; ``x[i]`` and ``y[i]`` are the runs of task i.

    Worked example: x = [1, 2], y = [0, 2] → pairs (1>0), (1<2), (2>0), (2=2) → (1 + 0 + 1 + ½) / 4 = 0.625.
    Fully separated samples give 1.0 (or 0.0); identical ones 0.5.
    """
    if len(x) != len(y) or not x:
        raise ValueError(f"need the same tasks on both sides, got {len(x)} and {len(y)}")
    pairs = [np.asarray(s, dtype=float) for xy in zip(x, y, strict=True) for s in xy]
    if any(len(s) == 0 for s in pairs):
        return NAN
    return interval(pairs, _improvement)


def performance_profile(strata: Sequence[np.ndarray], taus: Sequence[float]):
    """Share of runs scoring ≥ τ for each τ (averaged over tasks), with its 95% CI band.

    Returns ``(share, low, high)``, each ``(len(taus),)``.
    """
    levels = np.asarray(taus, dtype=float)

    def share(*tasks):
        per_task = [(t >= levels.reshape((-1,) + (1,) * t.ndim)).mean(axis=-1) for t in tasks]
        return np.mean(per_task, axis=0)

    strata = [np.asarray(s, dtype=float) for s in strata if len(s)]
    if not strata:
        nan = np.full(len(levels), np.nan)
        return nan, nan, nan
    low, high = bootstrap_ci(strata, share)
    return share(*strata), low, high


def clopper_pearson(solved: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson 1934) interval of a success probability from ``solved`` of ``n`` seeds.

    low is the p with P(X >= solved | n, p) = (1 - level) / 2 (0 when solved = 0), high the p with
    P(X <= solved | n, p) = (1 - level) / 2 (1 when solved = n); both are quantiles of a Beta distribution
    (``scipy.stats.beta``). Conservative: it covers the true p at least ``level`` of the time.
    """
    if not (isinstance(n, int) and n >= 1 and isinstance(solved, int) and 0 <= solved <= n):
        raise ValueError(f"clopper_pearson needs 0 <= solved <= n and n >= 1, got {solved}/{n}")
    from scipy.stats import beta

    tail = (1.0 - level) / 2.0
    low = 0.0 if solved == 0 else float(beta.ppf(tail, solved, n - solved + 1))
    high = 1.0 if solved == n else float(beta.ppf(1.0 - tail, solved + 1, n - solved))
    return low, high
