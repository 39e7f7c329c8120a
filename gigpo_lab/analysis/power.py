"""Seeds per arm for a paired contrast: the power calculation of a pre-registered study.

Two arms run on the same n seeds give n paired differences ``d_i = a_i - b_i`` (``paired.py``). A study plans
n so that a true mean difference of δ (the smallest effect worth detecting) is found with probability
``power`` by a two-sided test at level α. The planning model is the paired t-test on d with sd σ_d, whose
power is exact under normal differences (Cohen 1988, ch. 2; the noncentral t):

    power(n) = P(|T| > t_{1-α/2, n-1}),  T ~ noncentral t(df = n - 1, nc = δ √n / σ_d)

and n is the smallest n >= 2 with power(n) >= the target. Where the budget fixes n instead, the smallest
detectable effect is the δ at which power(n) reaches the target (``detectable_effect``). The study's test is the paired sign-flip
permutation test (``paired.sign_flip_pvalue``), whose power for normal differences is close to the t-test's
(its Pitman efficiency against the t-test is 1); the t-test is the planning model because its power has a
closed form.

A family of m contrasts under Holm's correction is planned at α/m, the level of Holm's first step and the
level at which every contrast is guaranteed to be tested (``planning_alpha``): conservative, since later
steps of Holm test at larger levels.
"""

from __future__ import annotations

import math

from scipy import optimize, stats

#: The largest n the search tries; ``seeds_for`` returns None beyond it (an effect too small for any budget).
MAX_SEEDS = 100_000


def planning_alpha(alpha: float, family_size: int) -> float:
    """The per-contrast level that plans a Holm family of ``family_size`` contrasts at family-wise ``alpha``."""
    if not 0 < alpha < 1 or family_size < 1:
        raise ValueError(f"need 0 < alpha < 1 and family_size >= 1, got {alpha}, {family_size}")
    return alpha / family_size


def paired_power(n: int, delta: float, sd_diff: float, alpha: float) -> float:
    """The power of the two-sided paired t-test at level ``alpha`` with n pairs, true mean difference
    ``delta`` and sd of the differences ``sd_diff`` (> 0)."""
    if n < 2:
        raise ValueError(f"a paired t-test needs n >= 2 pairs, got {n}")
    if sd_diff <= 0:
        raise ValueError(f"sd_diff must be > 0, got {sd_diff}")
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(delta) * math.sqrt(n) / sd_diff
    upper = float(stats.nct.sf(crit, df, nc))
    # the wrong-sign tail, P(T < -crit) = sf(crit) at -nc; scipy's nct returns nan there when it is far below
    # double precision (large nc), where its value is below Φ(-nc) and negligible
    lower = float(stats.nct.sf(crit, df, -nc))
    return upper + (lower if math.isfinite(lower) else 0.0)


def _z_sum(alpha: float, power: float) -> float:
    """z_{1-α/2} + z_power: the normal approximation's δ √n / σ_d at the target power (Cohen 1988, ch. 2)."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def seeds_for(delta: float, sd_diff: float, alpha: float, power: float = 0.8) -> int | None:
    """The smallest n >= 2 whose ``paired_power`` reaches ``power``; None if even ``MAX_SEEDS`` does not.

    When ``sd_diff`` is 0 (every pilot pair differed by the same amount) any n >= 2 detects a nonzero
    ``delta``; the function returns 2, and the caller should distrust a pilot that small.
    """
    if delta == 0:
        raise ValueError("delta must be nonzero: the smallest effect worth detecting")
    if sd_diff == 0:
        return 2
    # the normal approximation is a lower bound on the t-test's n; search upward from it
    n = max(2, math.floor((_z_sum(alpha, power) * sd_diff / abs(delta)) ** 2))
    while n <= MAX_SEEDS:
        if paired_power(n, delta, sd_diff, alpha) >= power:
            return n
        n += 1
    return None


def detectable_effect(n: int, sd_diff: float, alpha: float, power: float = 0.8) -> float:
    """The smallest true mean difference that the two-sided paired t-test at level ``alpha`` finds with
    probability ``power`` from n pairs whose differences have sd ``sd_diff`` (> 0): the δ with
    ``paired_power(n, δ, sd_diff, alpha) == power``, in the units of ``sd_diff``. What a study registers where
    the seeds its δ needs exceed its budget."""
    if not alpha < power < 1:
        raise ValueError(f"need alpha < power < 1, got alpha {alpha}, power {power}")
    paired_power(n, 1.0, sd_diff, alpha)  # the same checks of n and sd_diff
    # solved in units of sd_diff (the power depends on δ / sd_diff only), so the tolerance is relative; power
    # rises with δ from alpha at δ = 0 (below the target) to 1
    high = 4 * _z_sum(alpha, power) / math.sqrt(n)
    while paired_power(n, high, 1.0, alpha) < power:
        high *= 2
    return sd_diff * float(
        optimize.brentq(lambda d: paired_power(n, d, 1.0, alpha) - power, 0.0, high, xtol=1e-12)
    )
