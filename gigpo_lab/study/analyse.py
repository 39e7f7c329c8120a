"""``gigpo-lab study analyse``: a spec's families on its rows, by the one contrast engine, with verdicts.

For each family and each metric (its registered one first, then the spec's other metrics): every contrast's
paired statistics (``gigpo_lab.analysis.engine.run_family``, with the spec's stream), Holm's correction over
the whole family as registered, and, on a confirmatory family's registered metric, a verdict by the spec's rule
(``verdicts.RULES``). A contrast short of its family's planned seeds, or whose verdict would differ were the
other short contrasts' p-values 0 instead of 1, is marked **(provisional)**; every other verdict is final.

A side of a contrast is one arm or several: per seed, the mean of its arms; a seed counts when every arm of the
side finished it, and a pair when both sides have it. Where no row holds a side's seed, a prior analysis's value
of that side stands in (``rows.prior_sides``).

Writes ``analysis.json`` (each contrast's per-seed pairs, so every number can be re-derived), ``analysis.md``,
``rows.json`` (the rows read, so they outlive the store), ``forest.png`` (every contrast's mean difference and
CI against δ) and ``pairs-<family>.png`` (per seed, A against B).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gigpo_lab.analysis.engine import run_family
from gigpo_lab.analysis.stats import mean_estimate
from gigpo_lab.study import rows as study_rows
from gigpo_lab.study.spec import Family, Spec
from gigpo_lab.study.verdicts import RULES

PROVISIONAL = " (provisional)"


def side_values(rows: list[dict], setting: str, arms: tuple[str, ...], metric: str,
                prior: study_rows.Sides | None = None) -> dict[int, float]:  # fmt: skip
    """Per seed: the mean ``metric`` of ``arms`` in ``setting``, from ``rows`` on the seeds every arm
    finished there; on other seeds, the side's value in ``prior``, if any."""
    by = {(r["arm"], r["seed"]): r[metric] for r in rows if r["setting"] == setting}
    seeds = set.intersection(*({s for (arm, s) in by if arm == name} for name in arms))
    found = {s: float(np.mean([by[(name, s)] for name in arms])) for s in seeds}
    return (prior or {}).get((setting, arms, metric), {}) | found


def family_metrics(spec: Spec, family: Family) -> list[str]:
    """The metrics a family is reported on: its registered metric first, then the spec's others."""
    registered = spec.family_metric(family)
    return [registered, *(m for m in (spec.metric, *spec.secondary) if m != registered)]


def analyse_family(spec: Spec, family: Family, rows: list[dict], metric: str,
                   prior: study_rows.Sides | None = None) -> list[dict]:  # fmt: skip
    """One record per contrast of the family on ``metric`` (module docstring); ``verdict`` None where the
    family is not confirmatory or ``metric`` is not its registered one, ``not run`` below 2 pairs."""
    planned = len(spec.family_seeds(family))
    records, pairs = [], []
    for label, setting, a_arms, b_arms in family.expanded():
        a, b = (side_values(rows, setting, side, metric, prior) for side in (a_arms, b_arms))
        seeds = sorted(set(a) & set(b))
        record = {"contrast": label, "setting": setting, "a": list(a_arms), "b": list(b_arms),
                  "metric": metric, "n": len(seeds)}  # fmt: skip
        if len(seeds) >= 2:
            record.update(seeds=seeds, a_values=[a[s] for s in seeds], b_values=[b[s] for s in seeds])
            record["equal"] = sum(a[s] == b[s] for s in seeds)
        records.append(record)
        pairs.append(
            (np.array(record["a_values"]), np.array(record["b_values"])) if "seeds" in record else None
        )
    stream = spec.analysis
    results = run_family(
        pairs, seed=stream.seed, stream=stream.stream, resamples=stream.resamples, planned=planned
    )
    rule = RULES[spec.verdict]
    judged = family.confirmatory and metric == spec.family_metric(family)
    for record, done in zip(records, results, strict=True):
        if done is None:
            record.update({"p": 1.0, "holm_p": 1.0, "verdict": "not run"})
            continue
        r = done.result
        record.update({
            "mean_difference": r.mean_difference, "ci": [r.mean_low, r.mean_high], "improvement": r.improvement,
            "improvement_ci": [r.improvement_low, r.improvement_high], "d_z": r.d_z, "p": r.p_value,
            "holm_p": done.holm_high,
        })  # fmt: skip
        if not judged:
            record["verdict"] = None
            continue
        delta = spec.family_delta(family)
        verdict = rule(done.holm_high, r.mean_difference, r.mean_high, spec.alpha, delta)
        low = rule(done.holm_low, r.mean_difference, r.mean_high, spec.alpha, delta)
        record["verdict"] = verdict + (PROVISIONAL if record["n"] < planned or low != verdict else "")
    return records


def same_runs(rows: list[dict], copy: str, original: str) -> list[dict]:
    """Per setting where both arms ran: the seeds both finished, how many agree on every metric, and those
    metrics. A metric a ``recovered`` row lacks is not compared; a ``reused`` row did not run, and is not
    counted."""
    by = {study_rows.key(r): r for r in rows if not r.get("reused")}
    agree: dict[str, list[bool]] = {}
    compared: dict[str, set[str]] = {}
    for (setting, arm, seed), run in by.items():
        twin = by.get((setting, original, seed))
        if arm != copy or twin is None:
            continue
        held = [m for m in study_rows.METRICS
                if not any(r.get("recovered") and r[m] is None for r in (run, twin))]  # fmt: skip
        compared[setting] = compared.get(setting, set(held)) & set(held)
        agree.setdefault(setting, []).append(bool(held) and all(run[m] == twin[m] for m in held))
    return [
        {"setting": setting, "copy": copy, "original": original, "n": len(same), "same": sum(same),
         "metrics": [m for m in study_rows.METRICS if m in compared[setting]]}
        for setting, same in sorted(agree.items())
    ]  # fmt: skip


def arm_means(spec: Spec, rows: list[dict]) -> list[dict]:
    """Per (setting, arm), in the order first seen: its finished seeds and each metric's mean with its 95%
    bootstrap CI over seeds (descriptive). A ``reused`` row did not run, and is left out."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in (r for r in rows if not r.get("reused")):
        out.setdefault((r["setting"], r["arm"]), []).append(r)
    records = []
    for (setting, arm), runs in out.items():
        record = {"setting": setting, "arm": arm, "n": len(runs)}
        for metric in (spec.metric, *spec.secondary):
            e = mean_estimate([np.array([r[metric] for r in runs])])
            record[metric] = [e.value, e.low, e.high]
        records.append(record)
    return records


def gather(
    spec: Spec, *, prior: dict | None = None, **sources
) -> tuple[list[dict], list[dict], study_rows.Sides, dict, list[str]]:
    """The rows to analyse: ``rows.read_sources(spec, **sources)``, and an earlier analysis.json's content
    (``prior``) for runs they lack. Returns ``(rows, saved, prior, prior_json, notes)``: ``saved`` the rows read,
    each once; ``rows`` those, the rows recovered from the prior's one-arm sides, and the reused copies."""
    saved, notes = study_rows.read_sources(spec, **sources)
    prior_json = study_rows.relabel_analysis(spec, prior or {"same_runs": [], "arms": []})
    sides = study_rows.prior_sides(prior_json)
    have = set(map(study_rows.key, saved))
    recovered = [r for r in study_rows.rows_from_sides(sides) if study_rows.key(r) not in have]
    rows = study_rows.reuse(spec, recovered + saved)
    reused = Counter((r["setting"], r["arm"], r["reused"]) for r in rows if r.get("reused"))
    notes += [f"{setting} / {arm}: {n} seeds not run, {original}'s rows reused (same_runs.reuse_on)"
              for (setting, arm, original), n in reused.items()]  # fmt: skip
    return rows, saved, sides, prior_json, notes


def analyse(spec: Spec, rows: list[dict], prior: study_rows.Sides, prior_json: dict) -> dict:
    """Every family on each of its metrics (``<family>/<metric>``), the reruns (``same_runs``) and the arms'
    means (``arms``): the content of analysis.json."""
    out: dict = {}
    for family in spec.families:
        for metric in family_metrics(spec, family):
            out[f"{family.name}/{metric}"] = analyse_family(spec, family, rows, metric, prior)
    records = {(r["setting"], r["copy"]): r for r in prior_json.get("same_runs", [])}
    for pair in spec.same_runs:
        for r in same_runs(rows, pair.copy, pair.original):
            if r["n"] >= records.get((r["setting"], r["copy"]), {"n": 0})["n"]:
                records[(r["setting"], r["copy"])] = r
    out["same_runs"] = list(records.values())
    # the prior's arms in its order, each recomputed where rows hold it, then the arms it did not have
    by_arm = {(r["setting"], r["arm"]): r for r in prior_json.get("arms", [])}
    out["arms"] = list((by_arm | {(r["setting"], r["arm"]): r for r in arm_means(spec, rows)}).values())
    return out
