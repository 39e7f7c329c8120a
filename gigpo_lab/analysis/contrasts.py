"""Paired contrasts for ``gigpo-lab compare``: which configurations are pairs, and a family's results.

Two configurations of one env (one *task*: ``configs.py``) differ only in their own settings, the arm's keys;
a seed that finished in both ran on the same training env seeds and the same held-out evaluation episodes
(``training/seeds.py``: group seeds follow the run seed, evaluation seeds are fixed). So the two runs of a
seed are a pair, and ``paired.py`` analyses the pairs. Arms whose settings differ in what chooses the
evaluation episodes (``EVAL_PREFIXES``) are not paired; a seed that finished in one arm only is left out
of the pairs, with a note.

A **contrast** ``A:B`` names two configurations by words of their labels, as ``--baseline`` does (``gigpo:grpo``,
``"gigpo w=0.5":"gigpo w=0"``), and is resolved in every env where both match one configuration. The contrasts
of one command form one **family** (``--family``, default ``primary``); Holm's correction runs over the whole
family, every env's contrasts included: its m is the number of contrasts that had pairs (the notes name the
others). Without ``--contrast`` the family is every configuration against the baseline of its env.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gigpo_lab.analysis.engine import run_family
from gigpo_lab.analysis.paired import LEVEL, RESAMPLES, PairedResult
from gigpo_lab.analysis.stats import SEED
from gigpo_lab.analysis.summary import Row, Summary, matches_baseline

#: Setting prefixes that choose the evaluation episodes (their number, greedy or sampled, the temperature):
#: two arms that differ in one were not scored on the same episodes and are not paired.
EVAL_PREFIXES = ("rollout.eval_",)
TEST = "two-sided paired sign-flip permutation test of the mean difference"
INTERVAL = "percentile bootstrap over the paired seeds"


@dataclass(frozen=True)
class ContrastSpec:
    """``A:B`` from ``--contrast``: the words of configuration A's label and of B's (A - B, P(A > B))."""

    a: str
    b: str

    @classmethod
    def parse(cls, text: str) -> ContrastSpec:
        a, sep, b = text.partition(":")
        if not sep or not a.strip() or not b.strip() or ":" in b:
            raise ValueError(f"--contrast {text!r}: expected A:B, words of two labels, e.g. 'gigpo:grpo'")
        return cls(a.strip(), b.strip())


@dataclass
class Contrast:
    """A against B on their shared seeds; ``seeds``, ``a_values`` and ``b_values`` are aligned, ``(n,)``."""

    a: Row
    b: Row
    seeds: list[str]
    a_values: np.ndarray  # (n,) A's metric per shared seed
    b_values: np.ndarray  # (n,) B's metric per shared seed
    result: PairedResult
    only_a: list[str] = field(default_factory=list)  # seeds that finished in A only
    only_b: list[str] = field(default_factory=list)
    p_holm: float = math.nan

    @property
    def label(self) -> str:
        return f"{self.a.label} vs {self.b.label}"


@dataclass
class Family:
    """The contrasts of one family, their Holm-adjusted p-values, and what could not be paired."""

    name: str
    metric: str
    resamples: int
    contrasts: list[Contrast]
    notes: list[str] = field(default_factory=list)
    level: float = LEVEL
    seed: int = SEED  # every contrast's resampling stream starts from np.random.default_rng(seed)


def seed_values(row: Row, metric: str) -> dict[str, tuple[float, str]]:
    """The finished seeds of a row that logged a finite ``metric``: seed -> (final value, run id)."""
    runs = (r for r in row.config.finished if math.isfinite(r.final.get(metric, math.nan)))
    return {r.seed: (r.final[metric], r.run_id) for r in runs}


def _seed_order(seed: str) -> tuple:
    return (0, int(seed), "") if seed.isdigit() else (1, 0, seed)


def _by_task(rows: Sequence[Row]) -> dict[tuple, list[Row]]:
    tasks: dict[tuple, list[Row]] = {}
    for row in rows:
        tasks.setdefault(row.config.task, []).append(row)
    return tasks


def _match(rows: Sequence[Row], words: str) -> Row | None:
    found = [r for r in rows if matches_baseline(r.config, words)]
    if len(found) > 1:
        labels = ", ".join(repr(r.label) for r in found)
        raise ValueError(
            f"--contrast side {words!r} matches {len(found)} configurations: {labels}; add words"
        )
    return found[0] if found else None


def resolve(summary: Summary, specs: Sequence[ContrastSpec]) -> list[tuple[Row, Row]]:
    """The (A, B) rows of each spec in each env where both sides match, each pair once; ValueError when a spec
    matches none."""
    pairs: list[tuple[Row, Row]] = []
    for spec in dict.fromkeys(specs):
        found = [
            (a, b)
            for rows in _by_task(summary.rows).values()
            if (a := _match(rows, spec.a)) is not None and (b := _match(rows, spec.b)) is not None
        ]
        if any(a is b for a, b in found):
            raise ValueError(f"--contrast {spec.a}:{spec.b}: both sides name the same configuration")
        if not found:
            labels = ", ".join(repr(r.label) for r in summary.rows[:8])
            raise ValueError(
                f"--contrast {spec.a}:{spec.b}: no env has a configuration matching each side; labels: {labels}"
            )
        pairs += found
    return pairs


def against_baseline(summary: Summary) -> list[tuple[Row, Row]]:
    """Every configuration with a finished seed against the baseline of its env."""
    bases = {r.config.task: r for r in summary.rows if r.is_baseline}
    return [
        (row, bases[row.config.task])
        for row in summary.rows
        if row.n and not row.is_baseline and row.config.task in bases
    ]


def _eval_difference(a: Row, b: Row) -> list[str]:
    keys = set(a.config.settings) | set(b.config.settings)
    return sorted(
        k
        for k in keys
        if k.startswith(EVAL_PREFIXES) and a.config.settings.get(k) != b.config.settings.get(k)
    )


def paired_family(
    summary: Summary,
    specs: Sequence[ContrastSpec] = (),
    *,
    name: str | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Family:
    """The family's contrasts (``specs``, or every configuration against its env's baseline), Holm-adjusted."""
    if resamples < 100:
        raise ValueError(f"--resamples {resamples}: use at least 100 (50,000 for published tables)")
    pairs = resolve(summary, specs) if specs else against_baseline(summary)
    default = "primary" if specs else f"every configuration vs {summary.baseline!r}"
    family = Family(name or default, summary.metric, resamples, [], seed=seed)
    paired = []
    for a, b in pairs:
        label = f"{a.label} vs {b.label}"
        if differ := _eval_difference(a, b):
            family.notes.append(f"{label}: not paired, the evaluation episodes differ ({', '.join(differ)})")
            continue
        mine, theirs = seed_values(a, summary.metric), seed_values(b, summary.metric)
        seeds = sorted(mine.keys() & theirs.keys(), key=_seed_order)
        only_a = sorted(mine.keys() - theirs.keys(), key=_seed_order)
        only_b = sorted(theirs.keys() - mine.keys(), key=_seed_order)
        if only_a or only_b:
            family.notes.append(
                f"{label}: seeds in one arm only, left out of the pairs: "
                + "; ".join(f"{r.label}: {', '.join(s)}" for r, s in ((a, only_a), (b, only_b)) if s)
            )
        if not seeds:
            family.notes.append(f"{label}: no seed finished in both arms, nothing to pair")
            continue
        xa = np.array([mine[s][0] for s in seeds])
        xb = np.array([theirs[s][0] for s in seeds])
        paired.append((a, b, seeds, xa, xb, only_a, only_b))
    # the one contrast engine, with compare's stream: a fresh generator per contrast
    results = run_family([(p[3], p[4]) for p in paired], seed=seed, stream="contrast", resamples=resamples)
    for (a, b, seeds, xa, xb, only_a, only_b), done in zip(paired, results, strict=True):
        family.contrasts.append(Contrast(a, b, seeds, xa, xb, done.result, only_a, only_b, done.holm_high))
    return family


def _num(v: float) -> float | None:
    """A JSON number: non-finite values (no CI, an infinite d_z) become null."""
    return float(v) if math.isfinite(v) else None


def _estimate(value: float, low: float, high: float) -> dict:
    return {"value": _num(value), "low": _num(low), "high": _num(high)}


def per_seed(summary: Summary, family: Family | None) -> dict:
    """Everything the tables are computed from, JSON-ready: per arm and seed the metric, per contrast the pairs."""
    arms = [
        {
            "label": row.label,
            "env": row.config.env,
            "settings": row.config.settings,
            "seeds": [
                {"seed": s, "value": v, "run_id": run}
                for s, (v, run) in sorted(
                    seed_values(row, summary.metric).items(), key=lambda i: _seed_order(i[0])
                )
            ],
        }
        for row in summary.rows
    ]
    out: dict = {"metric": summary.metric, "arms": arms, "family": None}
    if family is None:
        return out
    contrasts = []
    for c in family.contrasts:
        r = c.result
        contrasts.append(
            {
                "label": c.label,
                "a": c.a.label,
                "b": c.b.label,
                "env": c.a.config.env,
                "seeds": c.seeds,
                "a_values": c.a_values.tolist(),
                "b_values": c.b_values.tolist(),
                "differences": r.differences.tolist(),
                "mean_difference": _estimate(r.mean_difference, r.mean_low, r.mean_high),
                "p_improvement": _estimate(r.improvement, r.improvement_low, r.improvement_high),
                "d_z": _num(r.d_z),
                "p_value": r.p_value,
                "p_holm": c.p_holm,
                "exact": r.exact,
                "ci_mc_error": r.ci_mc_error,
                "p_mc_error": r.p_mc_error,
                "only_a": c.only_a,
                "only_b": c.only_b,
            }
        )
    out["family"] = {
        "name": family.name,
        "test": TEST,
        "interval": INTERVAL,
        "correction": "Holm (1979) over the family",
        "resamples": family.resamples,
        "level": family.level,
        "bootstrap_seed": family.seed,
        "contrasts": contrasts,
        "notes": family.notes,
    }
    return out
