"""The pre-registered analysis of the study (experiments/PREREGISTRATION.md), as code.

    python experiments/study_analysis.py --store sqlite:///study.db --out experiments/results/study

Reads the finished runs of the study's experiments (``study_runs.read_runs``), then for each family of
``FAMILIES``: every contrast's paired statistics on the primary metric (``gigpo_lab.analysis.paired``: mean
difference with its 95% bootstrap CI, paired P(A > B), Cohen's d_z, the sign-flip p-value), Holm's correction
within the family, and a verdict by the rule fixed before any confirmatory run:

- **reproduced**: Holm-adjusted p < ``ALPHA`` and the mean difference is positive (A better, as claimed);
- **refuted**: the CI's upper end is below ``DELTA``, the smallest effect worth detecting: an effect that
  large in the claimed direction is excluded (this includes a significant difference the other way);
- **inconclusive at this power**: anything else.

While some contrasts of a family have not run all their seeds, they enter Holm's correction with p = 1, which
gives every other contrast its highest possible adjusted p. A verdict that would differ if those p-values were 0
(its lowest possible adjusted p), or whose own contrast has not run all its seeds, is marked **(provisional)**;
every other verdict is final.

``REPORTED`` holds the controls, the other estimators' contrasts and the LLM check, one Holm family each, analysed the same
way but given no verdict: the pre-registration reports them and does not confirm anything with them.
``SAME_RUNS`` names arms that rerun another arm's configuration (the ω grid's ends); the report counts the
seeds whose two runs agree on every metric, a reproducibility check added after the pre-registration.

A side of a contrast is one arm or several (the ω family's interior against its ends): per seed, the mean of
the side's arms on that seed; a seed counts when every arm of both sides finished it. Writes
``analysis.md``, ``analysis.json`` (each contrast's per-seed pairs, so every number can be re-derived) and
``rows.json`` (the runs read from the store and from ``--rows``, so they outlive the store).

The runs come from a store, from earlier ``rows.json`` files, or, for runs whose store was lost before rows
were saved, from an earlier ``analysis.json`` (``--prior``): a side whose arms have no row takes that analysis's
per-seed values, and the sides of one arm become rows again. A contrast recomputed from the same per-seed
values gets the same numbers when the contrasts before it in its family have their same seeds too (each family
draws its bootstrap and sign-flip stream in order).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import study_runs

from gigpo_lab.analysis.paired import holm, paired_contrast
from gigpo_lab.analysis.stats import mean_estimate

ALPHA = 0.05  #: family-wise error rate of each family
DELTA = 0.10  #: the smallest effect worth detecting, in units of the primary metric (success rate)
METRIC = "eval_auc"  #: the primary metric (study_runs.METRICS key)
SECONDARY = "eval_final"  #: reported beside it for every contrast, not confirmatory
SEED = 20261204  #: the analysis's bootstrap and sign-flip stream
N_SEEDS = 60  #: seeds per arm (PREREGISTRATION.md, "Power"); a contrast with fewer is still running


class Contrast(NamedTuple):
    """A claim "A beats B on this setting"; each side one arm or several (averaged per seed)."""

    name: str
    setting: str
    a: tuple[str, ...]
    b: tuple[str, ...]


def _omega(w: str) -> str:
    return f"gigpo estimator.step_advantage_weight={w}"


SETTINGS = ("frozenlake_random", "frozenlake8x8", "textworld_coin")
OMEGA_SETTINGS = ("frozenlake_random", "frozenlake8x8")
#: The primary claims: (id, A, B, the settings where the claim can be tested).
CLAIMS = (
    ("H1", "gigpo", "grpo", SETTINGS),
    # not on textworld_coin: at level 1 the observation never changes before the coin is taken, so every step
    # group is its whole episode group and the placebo's shuffle is the identity (the pilot: 10 of 10 seeds equal)
    ("H2", "gigpo", "gigpo_placebo", ("frozenlake_random", "frozenlake8x8")),
    ("H3", "gigpo", "rloo", SETTINGS),
)
FAMILIES: dict[str, list[Contrast]] = {
    "primary": [
        Contrast(f"{h} {s}", s, (a,), (b,)) for s in SETTINGS for h, a, b, where in CLAIMS if s in where
    ],
    "omega": [
        Contrast(f"H4 {s}", s, tuple(map(_omega, ("0.5", "1.0", "1.5"))), tuple(map(_omega, ("0.0", "2.0"))))
        for s in OMEGA_SETTINGS
    ],
}
#: The controls and secondary contrasts (PREREGISTRATION.md, "Controls and secondary contrasts"): on random-map
#: FrozenLake, paired by seed with the primary runs, one Holm family each, reported without verdicts; and the
#: small-n LLM check. On the no-repeat env the two estimators are equal bit for bit, so every pair must be equal
#: there (``MUST_BE_EQUAL``).
OTHER_ESTIMATORS = (
    "grpo_paper",
    "reinforce_pp",
    "ppo",
    "hgpo",
    "graphgpo",
    "gigpo_step_index",
    "gigpo_step_index_penalty",
)
REPORTED: dict[str, list[Contrast]] = {
    "no_repeat": [Contrast("no-repeat", "frozenlake_random", ("gigpo_no_repeat",), ("grpo_no_repeat",))],
    "penalty_dose": [Contrast("penalty dose", "frozenlake_random", ("gigpo",), ("grpo_penalty_dose",))],
    "exploration": [
        Contrast("no exploration", "frozenlake_random", ("gigpo_no_exploration",), ("grpo_no_exploration",))
    ],
    "estimators": [
        Contrast(f"gigpo vs {arm}", "frozenlake_random", ("gigpo",), (arm,)) for arm in OTHER_ESTIMATORS
    ],
    # PREREGISTRATION.md, "The LLM check": SmolLM2 + LoRA, experiments=smollm2_textworld_coin, seeds 0-4 paired;
    # its runs name no +experiments/study_env, so their setting is "default"; read on eval_final
    "llm": [Contrast("LLM check", "default", ("gigpo",), ("grpo",))],
}
#: The metric a reported family was registered on, where it is not ``METRIC``: the LLM check is read on the
#: sampled eval/final (every seed it ran, 0-4 as registered or more).
REGISTERED_METRIC = {"llm": SECONDARY}
#: Reported families whose pairs must all be equal; any that differ is a bug (PREREGISTRATION.md).
MUST_BE_EQUAL = ("no_repeat",)
#: Arms that rerun another arm's configuration under another name, in another command: the ω grid's ω = 1 is
#: the primary GiGPO arm, and its ω = 0 is the lab's GRPO (the step level weighs 0, and the invalid penalty's
#: dose (1 + ω)·p is GRPO's p). Each seed's two runs must agree on every metric. This checks that the runs are
#: reproducible; it is not a registered test.
SAME_RUNS = ((_omega("1.0"), "gigpo"), (_omega("0.0"), "grpo"))
#: Settings where a SAME_RUNS copy that did not run takes its original's runs (a deviation, RESULTS.md): on
#: FrozenLake 8×8, the store holding the first ω = 0 and ω = 1 reruns was lost with its machine, and this rule
#: stood in while they ran again (all 60 seeds finished, so no row is reused now). Reused rows are marked
#: ``reused`` and never count as a rerun in ``same_runs``.
REUSED = ("frozenlake8x8",)


def reuse(rows: list[dict], settings: tuple[str, ...] = REUSED) -> list[dict]:
    """``rows`` plus, on ``settings``, for each SAME_RUNS pair and each seed that the original finished and the
    copy did not: the original's row under the copy's name, with ``reused`` naming the original."""
    have = set(map(study_runs.key, rows))
    added = [
        r | {"arm": copy, "reused": original}
        for copy, original in SAME_RUNS
        for r in rows
        if r["setting"] in settings and r["arm"] == original and (r["setting"], copy, r["seed"]) not in have
    ]
    return rows + added


def side_values(
    rows: list[dict], setting: str, arms: tuple[str, ...], metric: str, prior: study_runs.Sides | None = None
) -> dict[int, float]:
    """Per seed: the mean ``metric`` of the arms of ``arms`` in ``setting``, from ``rows`` on the seeds every
    arm finished there; on other seeds, the side's value in ``prior`` (``study_runs.prior_sides``), if any."""
    by = {(r["arm"], r["seed"]): r[metric] for r in rows if r["setting"] == setting}
    seeds = set.intersection(*({s for (arm, s) in by if arm == name} for name in arms))
    found = {s: float(np.mean([by[(name, s)] for name in arms])) for s in seeds}
    return (prior or {}).get((setting, arms, metric), {}) | found


def verdict(holm_p: float, mean: float, high: float, alpha: float = ALPHA, delta: float = DELTA) -> str:
    """The pre-registered verdict of one contrast (module docstring)."""
    if holm_p < alpha and mean > 0:
        return "reproduced"
    if high < delta:
        return "refuted"
    return "inconclusive at this power"


def analyse(
    rows: list[dict],
    family: list[Contrast],
    metric: str = METRIC,
    resamples: int = 50_000,
    planned: int = N_SEEDS,
    confirmatory: bool = True,
    prior: study_runs.Sides | None = None,
) -> list[dict]:
    """One record per contrast of the family. Holm's correction is over the whole family as registered. A
    contrast whose arms share fewer than 2 seeds (not run yet, or lost) gets the verdict ``not run``. For each
    contrast, the others that have fewer than ``planned`` seeds enter Holm with p = 1. That gives its highest
    adjusted p (Holm's adjusted p-values never decrease when another p-value grows), which is reported. A
    verdict is marked provisional when its own contrast is short of ``planned`` seeds, or when it would differ
    with those others at p = 0. On a secondary metric, or in a family that is not ``confirmatory``, the verdict
    is None. ``equal`` counts the seeds whose two sides have the same value (on a metric of a few
    evaluations, ties happen by chance too). ``prior``: as ``side_values``'s."""
    rng = np.random.default_rng(SEED)
    records = []
    for c in family:
        a, b = (side_values(rows, c.setting, side, metric, prior) for side in (c.a, c.b))
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            records.append({"contrast": c.name, "setting": c.setting, "a": list(c.a), "b": list(c.b)})
            records[-1].update({"metric": metric, "n": len(seeds), "p": 1.0})
            continue
        result = paired_contrast(
            np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds]), resamples=resamples, rng=rng
        )
        records.append(
            {
                "contrast": c.name,
                "setting": c.setting,
                "a": list(c.a),
                "b": list(c.b),
                "metric": metric,
                "n": len(seeds),
                "seeds": seeds,
                "a_values": [a[s] for s in seeds],
                "b_values": [b[s] for s in seeds],
                "equal": sum(a[s] == b[s] for s in seeds),
                "mean_difference": result.mean_difference,
                "ci": [result.mean_low, result.mean_high],
                "improvement": result.improvement,
                "improvement_ci": [result.improvement_low, result.improvement_high],
                "d_z": result.d_z,
                "p": result.p_value,
            }  # fmt: skip
        )
    raw = np.array([r["p"] for r in records])
    for i, record in enumerate(records):
        if "mean_difference" not in record:
            record.update({"holm_p": 1.0, "verdict": "not run"})
            continue
        # the other contrasts still running (fewer than ``planned`` seeds, or none) may end anywhere in [0, 1]:
        # at 1 they give this one its highest Holm p, at 0 its lowest
        others = [j != i and records[j]["n"] < planned for j in range(len(records))]
        high = float(holm(np.where(others, 1.0, raw))[i])
        low = float(holm(np.where(others, 0.0, raw))[i])
        record["holm_p"] = high
        if metric != METRIC or not confirmatory:
            record["verdict"] = None  # only the primary metric of a confirmatory family gets verdicts
            continue
        record["verdict"] = verdict(high, record["mean_difference"], record["ci"][1])
        if (
            record["n"] < planned
            or verdict(low, record["mean_difference"], record["ci"][1]) != record["verdict"]
        ):
            record["verdict"] += (
                " (provisional)"  # its own seeds, or the family's other p-values, may change it
            )
    return records


def same_runs(rows: list[dict], copy: str, original: str) -> list[dict]:
    """Per setting where both arms ran: the seeds both finished, how many of them agree on every metric that
    ``study_runs.METRICS`` reads, and those metrics. A metric that a ``recovered`` row does not hold is not
    compared (``metrics`` then lists fewer); a ``reused`` row did not run, and is not counted."""
    by = {study_runs.key(r): r for r in rows if not r.get("reused")}
    agree: dict[str, list[bool]] = {}
    compared: dict[str, set[str]] = {}
    for (setting, arm, seed), run in by.items():
        twin = by.get((setting, original, seed))
        if arm != copy or twin is None:
            continue
        held = [
            m for m in study_runs.METRICS if not any(r.get("recovered") and r[m] is None for r in (run, twin))
        ]
        compared[setting] = compared.get(setting, set(held)) & set(held)
        agree.setdefault(setting, []).append(bool(held) and all(run[m] == twin[m] for m in held))
    return [
        {"setting": setting, "copy": copy, "original": original, "n": len(same), "same": sum(same),
         "metrics": [m for m in study_runs.METRICS if m in compared[setting]]}
        for setting, same in sorted(agree.items())
    ]  # fmt: skip


def arms(rows: list[dict]) -> list[dict]:
    """Per (setting, arm), in the order first seen: its finished seeds and the mean of each metric with its 95%
    bootstrap CI over seeds (descriptive, not a contrast). A ``reused`` row did not run, and is left out."""
    out = {}
    for r in (r for r in rows if not r.get("reused")):
        out.setdefault((r["setting"], r["arm"]), []).append(r)
    records = []
    for (setting, arm), runs in out.items():
        record = {"setting": setting, "arm": arm, "n": len(runs)}
        for metric in (METRIC, SECONDARY):
            e = mean_estimate([np.array([r[metric] for r in runs])])
            record[metric] = [e.value, e.low, e.high]
        records.append(record)
    return records


def arm_table(records: list[dict]) -> list[str]:
    """The ``arms`` records as a Markdown table."""
    lines = [f"| setting | arm | n | {METRIC} [95% CI] | {SECONDARY} [95% CI] |", "|---|---|---|---|---|"]
    for r in records:
        cells = [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in (r[METRIC], r[SECONDARY])]
        lines.append(f"| {r['setting']} | {r['arm']} | {r['n']} | {cells[0]} | {cells[1]} |")
    return lines


def table(records: list[dict]) -> list[str]:
    """The records as a Markdown table (a dash where there is no verdict; "equal": seeds whose sides have the
    same value)."""
    lines = [
        "| contrast | A | B | n | equal | mean A - B [95% CI] | P(A > B) [95% CI] | d_z | p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if r["verdict"] == "not run":
            lines.append(f"| {r['contrast']} | {' + '.join(r['a'])} | {' + '.join(r['b'])} | {r['n']} | "
                         "| | | | | | not run |")  # fmt: skip
            continue
        lo, hi = r["ci"]
        plo, phi = r["improvement_ci"]
        lines.append(
            f"| {r['contrast']} | {' + '.join(r['a'])} | {' + '.join(r['b'])} | {r['n']} | {r['equal']} | "
            f"{r['mean_difference']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {r['improvement']:.2f} [{plo:.2f}, {phi:.2f}] | "
            f"{r['d_z']:.2f} | {r['p']:.4f} | {r['holm_p']:.4f} | {r['verdict'] or '—'} |"
        )
    return lines


def gather(args: argparse.Namespace) -> tuple[list[dict], list[dict], study_runs.Sides, dict, list[str]]:
    """The runs to analyse: ``(rows, saved, prior, prior_json, notes)``. ``saved``: the rows read from the
    store and the ``--rows`` files, each once; ``rows``: those, the rows recovered from the prior analysis's
    sides of one arm for runs they lack, and the ``REUSED`` copies."""
    read, notes = [], []
    for name in args.experiment:
        found, more = study_runs.read_runs(args.store, name)
        read.append(found)
        notes += more
    saved, more = study_runs.merge(*read, *map(study_runs.load_rows, args.rows))
    notes += more
    prior_json = json.loads(args.prior.read_text()) if args.prior else {"same_runs": [], "arms": []}
    prior = study_runs.prior_sides(prior_json)
    have = set(map(study_runs.key, saved))
    recovered = [r for r in study_runs.rows_from_sides(prior) if study_runs.key(r) not in have]
    rows = reuse(recovered + saved)
    reused = Counter((r["setting"], r["arm"], r["reused"]) for r in rows if r.get("reused"))
    notes += [f"{setting} / {arm}: {n} seeds not run, {original}'s rows reused (REUSED)"
              for (setting, arm, original), n in reused.items()]  # fmt: skip
    return rows, saved, prior, prior_json, notes


def family_sections(rows: list[dict], prior: study_runs.Sides) -> tuple[dict, list[str]]:
    """Every family of ``FAMILIES`` and ``REPORTED`` on each metric: the records by ``family/metric``, and
    their Markdown sections."""
    out, text = {}, []
    for confirmatory, families in ((True, FAMILIES), (False, REPORTED)):
        for name, family in families.items():
            registered = REGISTERED_METRIC.get(name, METRIC)
            for metric in (registered, *({METRIC, SECONDARY} - {registered})):
                records = analyse(rows, family, metric, confirmatory=confirmatory, prior=prior)
                out[f"{name}/{metric}"] = records
                role = "registered metric" if metric == registered else "other metric"
                if not confirmatory or metric != registered:
                    role += ", not confirmatory"
                text += [f"## Family {name}: {metric} ({role})", "", *table(records), ""]
                if name in MUST_BE_EQUAL:
                    text += [f"**{r['contrast']}: {r['n'] - r['equal']} of {r['n']} pairs differ; the registered "
                             "expectation is 0 (any other count is a bug).**" for r in records if r["n"]]  # fmt: skip
                    text += [""]
    return out, text


def rerun_section(rows: list[dict], prior_json: dict) -> tuple[list[dict], list[str]]:
    """``same_runs`` for every ``SAME_RUNS`` pair, keeping a prior analysis's record where it covers more
    seeds, and its Markdown section (none if no pair ran)."""
    records = {(r["setting"], r["copy"]): r for r in prior_json["same_runs"]}
    for r in (r for copy, original in SAME_RUNS for r in same_runs(rows, copy, original)):
        if r["n"] >= records.get((r["setting"], r["copy"]), {"n": 0})["n"]:
            records[(r["setting"], r["copy"])] = r
    text = [f"- {r['setting']}: {r['copy']} against {r['original']}: {r['same']} of {r['n']} seeds identical on "
            f"{', '.join(r.get('metrics', study_runs.METRICS))} (any other count: the runs are not reproducible)"
            for r in records.values()]  # fmt: skip
    if text:
        text = ["## Reruns: the same configuration under two names (a check, not registered)", "", *text, ""]
    return list(records.values()), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="the study's MLflow store, read with --experiment")
    parser.add_argument("--experiment", action="append", default=[], help="repeat for each study experiment")
    parser.add_argument("--rows", action="append", default=[], type=Path, help="an earlier rows.json; repeat")
    parser.add_argument("--prior", type=Path, help="an earlier analysis.json, for runs no store or rows hold")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    if bool(args.store) != bool(args.experiment) or not (args.store or args.rows or args.prior):
        parser.error("give --store with one --experiment or more, and/or --rows or --prior")
    rows, saved, prior, prior_json, notes = gather(args)
    out, text = family_sections(rows, prior)
    out["same_runs"], more = rerun_section(rows, prior_json)
    text += more
    # the prior's arms in its order, each recomputed where rows hold it, then the arms it did not have
    by_arm = {(r["setting"], r["arm"]): r for r in prior_json["arms"]}
    out["arms"] = list((by_arm | {(r["setting"], r["arm"]): r for r in arms(rows)}).values())
    text += [
        "## Arms: each arm's mean over its finished seeds (descriptive)",
        "",
        *arm_table(out["arms"]),
        "",
    ]
    text += [f"- {n}" for n in notes]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "analysis.json").write_text(json.dumps(out, indent=1) + "\n")
    (args.out / "analysis.md").write_text("\n".join(text) + "\n")
    study_runs.save_rows(args.out / "rows.json", saved)
    print("\n".join(text))


if __name__ == "__main__":
    main()
