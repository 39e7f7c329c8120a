"""Small statistics over seeds: mean, sample std and Student-t confidence intervals, without scipy.

The t quantile is computed, not tabulated: the Student-t CDF is written with the regularized incomplete beta
function (evaluated by its continued fraction, modified Lentz method), and the quantile is found by
bisection on that CDF. This gives every confidence level and every number of seeds, and it matches the
printed tables (t_{0.975,1} = 12.706, t_{0.975,2} = 4.303, t_{0.975,4} = 2.776) to their last digit.

Worked example (3 seeds, success 0.2, 0.4, 0.9)::

    mean = 0.5,  s = sqrt(((-0.3)^2 + (-0.1)^2 + 0.4^2) / 2) = 0.3606   (sample std, n - 1)
    95% CI = mean ± t_{0.975,2} · s / sqrt(3) = 0.5 ± 4.303 · 0.2082 = 0.5 ± 0.8957
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_TINY = 1e-300
_EPS = 1e-15


def _incomplete_beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction 1 / (1 + d1 / (1 + d2 / (1 + ...))) of I_x(a, b), by the modified Lentz method.

    Its terms: d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) and d_{2m} = m(b-m) x / ((a+2m-1)(a+2m))
    (Abramowitz & Stegun 26.5.8).
    """
    f = c = 1.0
    d = 0.0
    for j in range(1, 10_000):
        m = j // 2
        if j % 2:
            term = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:
            term = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + term * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + term / c
        c = c if abs(c) > _TINY else _TINY
        f *= c * d
        if abs(c * d - 1.0) < _EPS:
            break
    return 1.0 / f


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side; use symmetry otherwise
        return math.exp(log_front) * _incomplete_beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom: 1 - I_{df/(df+t²)}(df/2, 1/2) / 2 for t >= 0."""
    if df <= 0:
        raise ValueError(f"df={df} must be > 0")
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (e.g. ``t_quantile(0.975, 2) = 4.303``)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} must lie in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Summary:
    """Mean, sample std (n - 1) and a two-sided Student-t confidence interval of n values.

    ``std`` is NaN for n < 2, and so are the CI bounds; ``mean`` is NaN for n = 0.
    """

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    level: float = 0.95

    @property
    def half_width(self) -> float:
        """t_{(1+level)/2, n-1} · s / sqrt(n)."""
        return (self.ci_high - self.ci_low) / 2.0


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def sample_std(values: Sequence[float]) -> float:
    """The unbiased-variance std, sqrt(Σ (x - mean)² / (n - 1)); NaN for n < 2."""
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def summarize_values(values: Sequence[float], level: float = 0.95) -> Summary:
    """Mean ± std and the ``level`` Student-t CI of the mean: mean ± t_{(1+level)/2, n-1} · s / sqrt(n)."""
    values = [float(v) for v in values]
    n, m, s = len(values), mean(values), sample_std(values)
    if n < 2:
        return Summary(n, m, math.nan, math.nan, math.nan, level)
    half = t_quantile((1.0 + level) / 2.0, n - 1) * s / math.sqrt(n)
    return Summary(n, m, s, m - half, m + half, level)
