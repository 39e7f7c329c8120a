"""The one contrast engine: a family of paired contrasts, their random streams, and Holm's correction.

``gigpo-lab compare`` and ``gigpo-lab study analyse`` both call ``run_family``. A family is a list of
contrasts, each the per-seed values of its two sides (``a, b: (n,)``, seed i aligned in both) or None for a
contrast that has no pairs yet. Each contrast gets ``paired.paired_contrast``'s statistics (mean paired
difference with its percentile-bootstrap CI, paired P(A > B), d_z, the sign-flip p-value), then Holm's
step-down correction runs over the whole family as listed, a contrast without pairs counting at p = 1 (it is
part of the family, and may never run).

**Streams**, so that every number reproduces: ``family`` draws one ``numpy.random.default_rng(seed)`` for the
family and hands it to the contrasts in order (a contrast without pairs draws nothing), the registered study's
order; ``contrast`` gives each contrast a fresh ``default_rng(seed)``, ``compare``'s.

**Provisional bounds.** While some contrasts of a family are short of their planned seeds (``planned``),
their p-values may still end anywhere in [0, 1]. For each contrast, ``holm_high`` puts the others that are
short at p = 1 (its highest possible adjusted p, since Holm's adjusted p-values never fall when another
p-value grows) and ``holm_low`` at p = 0 (its lowest). With every contrast complete, or ``planned`` None, the
two are equal: plain Holm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gigpo_lab.analysis.paired import PairedResult, holm, paired_contrast

STREAMS = ("family", "contrast")


@dataclass(frozen=True)
class ContrastResult:
    """One contrast's paired statistics and its Holm-adjusted p-values (``engine`` docstring)."""

    result: PairedResult
    holm_high: float
    holm_low: float


def run_family(
    pairs: Sequence[tuple[np.ndarray, np.ndarray] | None],
    *,
    seed: int,
    stream: str,
    resamples: int,
    planned: int | None = None,
) -> list[ContrastResult | None]:
    """Every contrast of the family, in order; None where it has no pairs (fewer than 1 seed).

    Args:
        pairs: per contrast ``(a, b)``, each ``(n,)``, or None.
        seed: the stream's seed.
        stream: ``family`` or ``contrast`` (module docstring).
        resamples: bootstrap resamples and Monte-Carlo sign flips per contrast.
        planned: the seeds a contrast is planned to have; None = every contrast is complete.
    """
    if stream not in STREAMS:
        raise ValueError(f"stream {stream!r}: expected one of {', '.join(STREAMS)}")
    shared = np.random.default_rng(seed)
    results: list[PairedResult | None] = []
    for pair in pairs:
        if pair is None:
            results.append(None)
            continue
        rng = shared if stream == "family" else np.random.default_rng(seed)
        results.append(paired_contrast(pair[0], pair[1], resamples=resamples, rng=rng))
    raw = np.array([1.0 if r is None else r.p_value for r in results])
    short = np.array([r is None or (planned is not None and r.n < planned) for r in results])
    out: list[ContrastResult | None] = []
    for i, result in enumerate(results):
        if result is None:
            out.append(None)
            continue
        others = short & (np.arange(len(results)) != i)
        high = float(holm(np.where(others, 1.0, raw))[i])
        low = float(holm(np.where(others, 0.0, raw))[i])
        out.append(ContrastResult(result, high, low))
    return out
