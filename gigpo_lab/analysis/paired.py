"""Paired statistics of two arms run on the same seeds: ``gigpo-lab compare``'s contrasts, in plain numpy.

Two arms that share a seed share its training env seeds and its held-out evaluation episodes, so their
outcomes on that seed are a pair, and the pair's difference removes what the seed contributes to both. Given
the metric of arm A and arm B on the same n seeds, ``a, b: (n,)``, seed i aligned in both:

- **differences** ``d = a - b``, ``(n,)``;
- **mean paired difference** ``mean(d)`` with its 95% percentile-bootstrap CI (the mean, not the IQM: the
  mean is what the test below tests and what d_z scales);
- **P(improvement)**, paired: ``P = mean_i([a_i > b_i] + ½[a_i = b_i])``, the share of seeds on which A beats B,
  ties counting half. rliable's ``probability_of_improvement`` (Agarwal et al. 2021) compares every run of A
  with every run of B (the Mann-Whitney U over n·m); paired, only a seed's two runs are compared. Its CI
  resamples the same seed indices as the mean difference's;
- **effect size** Cohen's d_z = mean(d) / sd(d) (sd with n - 1; Lakens 2013, "Calculating and reporting effect
  sizes", eq. 5), without Hedges' small-sample correction;
- **p-value**: a two-sided paired sign-flip permutation test of mean(d) = 0 (Fisher 1935; under H0 each
  pair's sign is exchangeable). Exact, by enumerating all 2^m sign vectors of the m non-zero differences, when
  2^m <= the resamples; otherwise Monte-Carlo with ``(1 + hits) / (1 + R)`` (Phipson & Smyth 2010), which is
  never 0 and keeps the test valid;
- **Holm's step-down correction** (Holm 1979) of a family's p-values, controlling its family-wise error rate.

The bootstrap is rliable's percentile interval (``get_interval_estimates(method="percentile")``, whose default
is 50,000 resamples), vectorised: one ``(R, n)`` index array per contrast (about 0.06 s for 50,000 resamples
of 30 pairs on one core; ``experiments/bench/bench_paired.py`` sets it beside a one-resample-at-a-time loop).
Every function is pure given its ``rng``; the Monte-Carlo error of what the resamples estimate is returned
beside it.

Limits, measured (``tests/analysis/test_paired.py``): at n = 30 the 95% intervals of P and of the mean
difference cover the truth about 94% of the time (the percentile bootstrap's small-sample shortfall). When
every seed improves (P = 1) the percentile interval of P collapses to [1, 1]; the sign-flip p-value (2 / 2^n)
is then the measure of evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESAMPLES = (
    50_000  #: bootstrap resamples and sign flips per contrast (rliable's default for interval estimates)
)
LEVEL = 0.95  #: confidence level of every interval


@dataclass(frozen=True)
class PairedResult:
    """The paired statistics of A against B on n shared seeds; CIs are NaN below 2 pairs."""

    differences: np.ndarray  # (n,) a - b per seed
    mean_difference: float
    mean_low: float
    mean_high: float
    improvement: float  # paired P(A > B), ties ½
    improvement_low: float
    improvement_high: float
    d_z: float  # Cohen's d_z = mean(d) / sd(d); ±inf when every difference is equal and non-zero
    p_value: float  # two-sided sign-flip permutation test
    exact: bool  # whether p_value enumerated every sign vector
    resamples: int
    ci_mc_error: float  # Monte-Carlo standard error of the CI endpoints (the largest of the four)
    p_mc_error: float  # Monte-Carlo standard error of p_value (0 when exact)

    @property
    def n(self) -> int:
        return len(self.differences)


def improvement_indicators(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per pair, 1 where A beats B, ½ on a tie, 0 where B wins: ``a, b: (..., n)`` -> ``(..., n)``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return (a > b) + 0.5 * (a == b)


def bootstrap_means(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The mean of each row of ``values`` over each resample of its columns.

    Args:
        values: ``(k, n)``: k statistics' per-seed values, column i = seed i in every row.
        indices: ``(R, n)``: R resamples of the seeds, drawn with replacement.

    Returns ``(k, R)``; the k rows are resampled together (the same seeds in each resample).
    """
    return np.stack([np.take(row, indices).mean(axis=-1) for row in np.asarray(values, dtype=float)])


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of bootstrap ``samples: (..., R)``: ``(low, high)``, each ``(...)``."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail], axis=-1)
    return low, high


def quantile_mc_error(samples: np.ndarray, q: float) -> np.ndarray:
    """Monte-Carlo standard error of the q-quantile of ``samples: (..., R)``, as an estimate of the bootstrap's.

    The count of resamples below the true quantile is Binomial(R, q), of sd s = sqrt(R q (1 - q)); the order
    statistics s ranks either side of the estimate's rank bracket it by about one standard error, so half
    their spread is that error (the distribution-free order-statistic method). Returns ``(...)``; 0 where
    the samples are constant around the quantile (a statistic on a lattice, e.g. P at n = 10).
    """
    ordered = np.sort(samples, axis=-1)
    r = ordered.shape[-1]
    rank, spread = q * (r - 1), math.sqrt(r * q * (1.0 - q))
    lo = int(np.clip(math.floor(rank - spread), 0, r - 1))
    hi = int(np.clip(math.ceil(rank + spread), 0, r - 1))
    return (ordered[..., hi] - ordered[..., lo]) / 2.0


def cohens_dz(d: np.ndarray) -> float:
    """Cohen's d_z of differences ``d: (n,)``: mean / sd (n - 1). NaN below 2; 0 or ±inf when sd = 0."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd > 0:
        return mean / sd
    return 0.0 if mean == 0 else math.copysign(math.inf, mean)


def all_signs(m: int) -> np.ndarray:
    """Every sign vector of length m, ``(2**m, m)`` of ±1: row j holds the bits of j (1 -> -1)."""
    bits = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
    return 1.0 - 2.0 * bits


def sign_flip_pvalue(d: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, bool]:
    """Two-sided paired sign-flip permutation p-value of mean(d) = 0; ``d: (n,)``.

    Zero differences are the same under either sign and are left out. With m non-zero differences: exact
    (``hits / 2^m`` over all 2^m sign vectors) when 2^m <= ``resamples``, else ``(1 + hits) / (1 + R)`` over R
    random sign vectors. A hit is a sign vector whose |sum| is >= the observed |sum| (up to rounding).

    Returns ``(p, exact)``. Example: d = (1, 2, 3) -> sums ±1 ± 2 ± 3; |sum| >= 6 only for all + or all -:
    p = 2/8 = 0.25.
    """
    d = np.asarray(d, dtype=float)
    d = d[d != 0]
    m = len(d)
    if m == 0:
        return 1.0, True
    observed = abs(float(d.sum()))
    tolerance = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if 2**m <= resamples:
        hits = np.abs(all_signs(m) @ d) >= observed - tolerance
        return float(hits.mean()), True
    signs = 1.0 - 2.0 * rng.integers(0, 2, size=(resamples, m), dtype=np.int8)
    hits = np.abs(signs @ d) >= observed - tolerance
    return float((1 + hits.sum()) / (1 + resamples)), False


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family, ``(m,)`` -> ``(m,)`` in the same order.

    Sorted ascending, p_(j) is scaled by (m - j + 1), then made non-decreasing (a running maximum) and capped
    at 1. Example: p = (0.01, 0.04, 0.03) -> sorted 0.01, 0.03, 0.04 scaled by 3, 2, 1 -> 0.03, 0.06, 0.04 ->
    running max 0.03, 0.06, 0.06 -> in the input order (0.03, 0.06, 0.06).
    """
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def paired_contrast(
    a: np.ndarray,
    b: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    rng: np.random.Generator,
    level: float = LEVEL,
) -> PairedResult:
    """Every paired statistic of A against B: ``a, b: (n,)``, seed i in position i of both.

    One ``(R, n)`` array of resampled seed indices drives both CIs (mean difference and P(improvement)); the
    sign flips are drawn after it from the same ``rng``.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired samples need the same shape (n,) with n >= 1, got {a.shape} and {b.shape}")
    d = a - b
    wins = improvement_indicators(a, b)
    n = len(d)
    nan2 = (math.nan, math.nan)
    (mean_low, mean_high), (poi_low, poi_high), ci_error = nan2, nan2, 0.0
    if n >= 2:
        indices = rng.integers(0, n, size=(resamples, n))
        samples = bootstrap_means(np.stack([d, wins]), indices)  # (2, R)
        low, high = percentile_interval(samples, level)
        (mean_low, poi_low), (mean_high, poi_high) = low.tolist(), high.tolist()
        tail = (1.0 - level) / 2.0
        ci_error = float(max(quantile_mc_error(samples, q).max() for q in (tail, 1.0 - tail)))
    p, exact = sign_flip_pvalue(d, resamples, rng)
    return PairedResult(
        differences=d,
        mean_difference=float(d.mean()),
        mean_low=mean_low,
        mean_high=mean_high,
        improvement=float(wins.mean()),
        improvement_low=poi_low,
        improvement_high=poi_high,
        d_z=cohens_dz(d),
        p_value=p,
        exact=exact,
        resamples=resamples,
        ci_mc_error=ci_error,
        p_mc_error=0.0 if exact else math.sqrt(p * (1.0 - p) / resamples),
    )
