"""One row of statistics per configuration, and one per method across envs (``gigpo-lab compare``'s numbers).

Per configuration, over its finished seeds (``stats.py`` for the estimators):

- **final**: the last logged value of the metric; its IQM and mean, each with a 95% bootstrap CI;
- **P(>base)**: the probability of improvement over the baseline configuration of the same env, with CI;
- **solved k/n**: seeds whose final value is ≥ the threshold (default 0.8), out of the finished seeds;
- **steps to threshold**: env steps (``eval/env_steps_total``) at the first eval that reached the threshold,
  the median over the seeds that reached it (a seed may reach it and fall back: solved counts the final);
- **AUC**: the area under the learning curve, the mean of the metric over a run's eval points; its mean
  over seeds with CI;
- **best**: the maximum of a run's curve, mean over seeds.

Across envs (a *method* is a configuration's label without its env), the same estimators are stratified by
env: each env's runs are resampled within that env (Agarwal et al. 2021). Only methods that ran in every env
are aggregated. The baseline is chosen by ``--baseline``: every word of it must be in a label, e.g. ``grpo``
or ``gigpo ω=0`` (``w=0`` works too; numbers compare as numbers).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gigpo_lab.analysis import stats
from gigpo_lab.analysis.configs import Config
from gigpo_lab.analysis.runs import ROLLOUT_STEPS, RunRecord
from gigpo_lab.analysis.stats import NAN, Estimate

DEFAULT_THRESHOLD = 0.8
DEFAULT_BASELINE = "grpo"


@dataclass
class Row:
    """One configuration's statistics over its finished seeds."""

    config: Config
    scores: np.ndarray  # (n,) the final metric of each finished seed
    iqm: Estimate
    mean: Estimate
    auc: Estimate  # mean over seeds of each run's mean eval value
    best: Estimate  # mean over seeds of each run's maximum
    solved: int  # seeds with final >= threshold
    steps_to_threshold: float  # median env steps at the first eval >= threshold, over seeds that reached it
    reached: int  # seeds whose curve reached the threshold at some eval
    env_steps: float  # mean final rollout/env_steps_total (the budget used)
    poi: Estimate = NAN  # P(this > baseline) in the same env
    is_baseline: bool = False

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def strata(self) -> list[np.ndarray]:
        return [self.scores]

    @property
    def all_failed(self) -> bool:
        return not self.config.finished


@dataclass
class MethodRow:
    """A method across envs: the stratified statistics over every env it ran in."""

    method: tuple
    label: str
    rows: list[Row]  # one per env
    iqm: Estimate
    mean: Estimate
    poi: Estimate = NAN
    n: int = 0
    is_baseline: bool = False

    @property
    def strata(self) -> list[np.ndarray]:
        return [r.scores for r in self.rows]


@dataclass
class Summary:
    """Everything compare reports, metric and threshold included."""

    metric: str
    threshold: float
    baseline: str
    rows: list[Row]
    methods: list[MethodRow] = field(default_factory=list)  # across envs; empty with one env
    notes: list[str] = field(default_factory=list)


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _first_reach(run: RunRecord, metric: str, threshold: float) -> float | None:
    return next((x for x, y in run.points(metric) if y >= threshold), None)


def _row(config: Config, metric: str, threshold: float) -> Row:
    runs = [r for r in config.finished if math.isfinite(r.final.get(metric, math.nan))]
    scores = np.array([r.final[metric] for r in runs])
    aucs = np.array(
        _finite(statistics.fmean(y for _, y in r.points(metric)) for r in runs if r.points(metric))
    )
    bests = np.array(_finite(max((y for _, y in r.points(metric)), default=r.final[metric]) for r in runs))
    reach = [x for r in runs if (x := _first_reach(r, metric, threshold)) is not None]
    budget = _finite(r.final.get(ROLLOUT_STEPS) for r in runs)
    return Row(
        config,
        scores,
        iqm=stats.iqm_estimate([scores]),
        mean=stats.mean_estimate([scores]),
        auc=stats.mean_estimate([aucs]),
        best=stats.mean_estimate([bests]),
        solved=int((scores >= threshold).sum()),
        steps_to_threshold=statistics.median(_finite(reach)) if _finite(reach) else math.nan,
        reached=len(reach),
        env_steps=statistics.fmean(budget) if budget else math.nan,
    )


def _matches(word: str, token: str) -> bool:
    if word == token:
        return True
    (wk, ws, wv), (tk, ts, tv) = word.partition("="), token.partition("=")
    if not (ws and ts and wk == tk):
        return False
    try:
        return float(wv) == float(tv)
    except ValueError:
        return False


def _word(word: str) -> str:
    """``w=0.5`` and ``omega=0.5`` spell ``ω=0.5``."""
    for alias in ("omega=", "w="):
        if word.startswith(alias):
            return "ω=" + word[len(alias) :]
    return word


def matches_baseline(config: Config, spec: str) -> bool:
    """Whether every word of ``spec`` is a token of the configuration's label."""
    words = [_word(w) for w in spec.split()]
    return bool(words) and all(any(_matches(w, t) for t in config.tokens) for w in words)


def _baselines(rows: Sequence[Row], spec: str) -> dict[tuple, Row]:
    """The baseline row of each env; ValueError when one env has several matches."""
    found: dict[tuple, list[Row]] = {}
    for row in rows:
        if matches_baseline(row.config, spec):
            found.setdefault(row.config.task, []).append(row)
    for task, matched in found.items():
        if len(matched) > 1:
            labels = ", ".join(repr(r.config.label) for r in matched)
            raise ValueError(
                f"--baseline {spec!r} matches {len(matched)} configurations of env {task[0]}: {labels}; "
                "add words of the one you mean"
            )
    return {task: matched[0] for task, matched in found.items()}


def summarize(
    configs: Sequence[Config],
    metric: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    baseline: str = DEFAULT_BASELINE,
) -> Summary:
    """The rows (one per configuration) and, with several envs, the methods across envs."""
    rows = [_row(c, metric, threshold) for c in configs]
    summary = Summary(metric, threshold, baseline, rows)
    bases = _baselines(rows, baseline)
    if not bases:
        labels = ", ".join(repr(r.config.label) for r in rows[:6])
        summary.notes.append(
            f"no configuration matches the baseline {baseline!r}: no P(>base) column "
            f"(--baseline picks one by the words of its label, e.g. {labels})"
        )
    for row in rows:
        base = bases.get(row.config.task)
        row.is_baseline = base is row
        if base is not None and row.n and base.n:
            row.poi = stats.probability_of_improvement([row.scores], [base.scores])
    tasks = sorted({r.config.task for r in rows}, key=str)
    if len(tasks) > 1:
        summary.methods = _methods(rows, tasks, bases, summary.notes)
    return summary


def _methods(
    rows: Sequence[Row], tasks: list[tuple], bases: dict[tuple, Row], notes: list[str]
) -> list[MethodRow]:
    by_method: dict[tuple, dict[tuple, Row]] = {}
    for row in rows:
        by_method.setdefault(row.config.method, {})[row.config.task] = row
    complete_base = all(t in bases and bases[t].n for t in tasks)
    methods = []
    for method, per_task in by_method.items():
        if set(per_task) != set(tasks) or not all(r.n for r in per_task.values()):
            notes.append(
                f"{' '.join(method)}: not in every env with a finished run, left out of the across-envs rows"
            )
            continue
        mine = [per_task[t] for t in tasks]
        is_base = complete_base and all(bases[t] is r for t, r in zip(tasks, mine, strict=True))
        strata = [r.scores for r in mine]
        poi = (
            stats.probability_of_improvement(strata, [bases[t].scores for t in tasks])
            if complete_base
            else NAN
        )
        methods.append(
            MethodRow(
                method,
                " ".join(method),
                mine,
                stats.iqm_estimate(strata),
                stats.mean_estimate(strata),
                poi,
                sum(r.n for r in mine),
                is_base,
            )
        )
    return methods
