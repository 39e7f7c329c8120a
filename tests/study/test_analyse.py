"""gigpo_lab.study.analyse on the registered study's spec (experiments/studies/gigpo_claims.yaml), on
synthetic per-seed data where the true answer is known: a large effect is reproduced, a true null is refuted, a
small sample is inconclusive, and the ω family averages its sides per seed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gigpo_lab.study import analyse as study
from gigpo_lab.study import rows as study_runs
from gigpo_lab.study.report import arm_table, contrast_table
from gigpo_lab.study.spec import Analysis, Seeds, load_spec
from gigpo_lab.study.verdicts import delta_rule

SPEC = load_spec("gigpo_claims").spec
DELTA = SPEC.delta


def _omega(w: str) -> str:
    return f"omega_{w}"


def _spec(resamples: int, planned: int):
    return dataclasses.replace(
        SPEC, seeds=Seeds(0, planned), analysis=Analysis(SPEC.analysis.seed, resamples)
    )


def analyse(rows, family, metric=None, resamples=50_000, planned=60, confirmatory=None, prior=None):
    """One family's records, as the registered spec analyses them, at ``resamples`` and ``planned`` seeds."""
    fam = next(f for f in SPEC.families if f.name == family)
    if confirmatory is not None:
        fam = dataclasses.replace(fam, confirmatory=confirmatory)
    spec = _spec(resamples, planned)
    spec = dataclasses.replace(spec, families=tuple(fam if f.name == family else f for f in spec.families))
    return study.analyse_family(spec, fam, rows, metric or spec.family_metric(fam), prior)


SAME_RUNS = tuple((p.copy, p.original) for p in SPEC.same_runs)


def _rows(setting: str, arms: dict[str, np.ndarray]) -> list[dict]:
    return [
        {"setting": setting, "arm": arm, "seed": seed, "eval_auc": float(v), "eval_final": float(v) / 2}
        for arm, values in arms.items()
        for seed, v in enumerate(values)
    ]


def test_the_primary_family_gets_each_verdict_where_the_truth_is_known():
    rng = np.random.default_rng(1)
    n = 40
    base = rng.uniform(0.3, 0.6, n)  # a seed's difficulty, shared by its arms: pairing removes it
    rows = _rows(
        "frozenlake_random",
        {
            "grpo": base,
            "gigpo": base + 0.15 + rng.normal(0, 0.05, n),  # a true +0.15: reproduced
            "gigpo_placebo": base
            + 0.15
            + rng.normal(0, 0.05, n),  # gigpo - placebo: a true 0, tight: refuted
        },
    )
    # RLOO on 3 seeds only, with a true +0.1 under large noise: inconclusive
    rows += _rows("frozenlake_random", {"rloo": base[:3] + rng.normal(0, 0.3, 3)})
    records = {r["contrast"]: r for r in analyse(rows, "primary", resamples=4000, planned=n)}
    ran = {name for name, r in records.items() if r["verdict"] != "not run"}
    assert ran == {"H1 frozenlake_random", "H2 frozenlake_random", "H3 frozenlake_random"}
    assert len(records) == 8  # the other settings' 5 contrasts enter Holm with p = 1
    h1, h2, h3 = (records[f"H{i} frozenlake_random"] for i in (1, 2, 3))
    assert (
        h1["verdict"] == "reproduced"
        and h1["n"] == n
        and h1["mean_difference"] == pytest.approx(0.15, abs=0.03)
    )
    assert h2["verdict"] == "refuted" and h2["ci"][1] < DELTA
    assert h3["verdict"] == "inconclusive at this power (provisional)" and h3["n"] == 3  # 3 of its 40 seeds
    # Holm over the registered eight: the adjusted p is never below the raw one, and at most 1; the smallest
    # p of the three is the family's smallest, so its adjusted p is 8 times it
    for r in (h1, h2, h3):
        assert r["p"] <= r["holm_p"] <= 1.0
    smallest = min((h1, h2, h3), key=lambda r: r["p"])
    assert smallest["holm_p"] == pytest.approx(min(1.0, 8 * smallest["p"]))
    # the secondary metric is the same data at half scale: same signs, same p (the sign-flip test is scale-free)
    final = {r["contrast"]: r for r in analyse(rows, "primary", "eval_final", 4000)}
    assert final["H1 frozenlake_random"]["mean_difference"] == pytest.approx(h1["mean_difference"] / 2)
    assert {r["verdict"] for r in final.values()} == {None, "not run"}  # not confirmatory: no verdicts
    secondary = contrast_table(list(final.values()))
    assert not any(v in line for line in secondary[2:] for v in ("reproduced", "refuted", "inconclusive"))


def test_a_side_of_several_arms_is_their_mean_per_seed_on_shared_seeds():
    w = _omega
    rows = _rows(
        "frozenlake8x8", {w("0.5"): [0.6, 0.6, 0.6], w("1.0"): [0.9, 0.6, 0.3], w("1.5"): [0.3, 0.3, 0.3]}
    )
    rows += _rows("frozenlake8x8", {w("0.0"): [0.2, 0.2], w("2.0"): [0.4, 0.4, 0.4]})  # ω = 0 lacks seed 2
    interior = study.side_values(rows, "frozenlake8x8", (w("0.5"), w("1.0"), w("1.5")), "eval_auc")
    ends = study.side_values(rows, "frozenlake8x8", (w("0.0"), w("2.0")), "eval_auc")
    assert interior == pytest.approx({0: 0.6, 1: 0.5, 2: 0.4})
    assert ends == pytest.approx({0: 0.3, 1: 0.3})
    records = analyse(rows, "omega", resamples=1000)
    ran, missing = records[1], records[0]
    assert (missing["contrast"], missing["verdict"]) == ("H4 frozenlake_random", "not run")  # no runs there
    assert ran["seeds"] == [0, 1] and ran["mean_difference"] == pytest.approx(0.25)
    # Holm over the registered family of 2: the missing contrast counts with p = 1
    assert ran["holm_p"] == pytest.approx(min(1.0, 2 * ran["p"]))
    assert "not run" in "\n".join(contrast_table(records))


@pytest.mark.parametrize(
    ("holm_p", "mean", "high", "expected"),
    [
        (0.01, 0.1, 0.2, "reproduced"),
        (0.01, -0.1, -0.05, "refuted"),  # significant the other way
        (0.5, 0.01, 0.04, "refuted"),  # an effect of DELTA excluded
        (0.5, 0.01, 0.2, "inconclusive at this power"),
        (0.06, 0.1, 0.2, "inconclusive at this power"),
    ],
)
def test_the_verdict_rule(holm_p, mean, high, expected):
    assert delta_rule(holm_p, mean, high, alpha=0.05, delta=0.05) == expected


def test_the_spec_holds_what_the_preregistration_states():
    """The registered study's spec carries the constants PREREGISTRATION.md states in words: its primary
    metric, δ, the family-wise α, the LLM check's metric and the no-repeat control's expectation."""
    import re

    from gigpo_lab.config_paths import config_root

    text = (config_root() / "experiments" / "PREREGISTRATION.md").read_text()
    metric = re.search(r"\*\*Primary metric: `eval/(\w+)`", text).group(1)
    delta = re.search(r"\*\*The smallest effect worth detecting: δ = (\d\.\d+)\*\*", text).group(1)
    assert SPEC.metric == f"eval_{metric}" and SPEC.secondary == ("eval_final",)
    assert SPEC.delta == float(delta)
    assert f"family-wise {SPEC.alpha}" in text
    llm = text.split("## The LLM check")[1].split("\n## ")[0]
    llm_metric = re.search(r"on the sampled\s+`eval/(\w+)`", llm).group(1)
    family = {f.name: f for f in SPEC.families}
    assert family["llm"].metric == f"eval_{llm_metric}" and not family["llm"].confirmatory
    assert "must be 0 on every seed" in text and [f.name for f in SPEC.families if f.must_be_equal] == [
        "no_repeat"
    ]


def test_a_verdict_the_missing_contrasts_could_change_is_provisional():
    """With 5 of the primary family's 8 contrasts missing, a small significant gain (Holm p above 0.05 over 8,
    below it if the others were all tiny) is refuted provisionally; a clear null and a gain the other way are
    final."""
    rng = np.random.default_rng(3)
    n = 60
    base = rng.uniform(0.2, 0.4, n)
    z = rng.normal(0, 1, n)
    z = (z - z.mean()) / z.std(ddof=1)  # exactly mean 0, sd 1: t = 0.02 / (0.06 / sqrt(60)) = 2.58, p ~0.012
    rows = _rows(
        "frozenlake_random",
        {
            "grpo": base,
            "gigpo": base + 0.02 + 0.06 * z,  # 8p > 0.05 > 3p: refuted over 8, reproduced if 5 others were 0
            "gigpo_placebo": base + 0.02 + rng.normal(0, 0.06, n),
            "rloo": base + 0.06 + rng.normal(0, 0.06, n),  # RLOO better: refuted whatever the rest
        },
    )
    records = {r["contrast"]: r for r in analyse(rows, "primary", resamples=4000)}
    h1, h2, h3 = (records[f"H{i} frozenlake_random"] for i in (1, 2, 3))
    assert 0.05 / 8 < h1["p"] < 0.05 / 3 and h1["holm_p"] >= 0.05
    assert h1["verdict"] == "refuted (provisional)"
    assert h2["verdict"] == "refuted" and h3["verdict"] == "refuted" and h3["mean_difference"] < 0


def test_a_contrast_short_of_its_seeds_is_provisional_and_bounds_the_others_from_both_sides():
    """H1 has 30 of its 60 seeds: its own verdict is provisional, and for H2 it counts as p in [0, 1]."""
    rng = np.random.default_rng(5)
    base = rng.uniform(0.2, 0.4, 60)
    rows = _rows("frozenlake_random", {"gigpo": base + 0.3, "gigpo_placebo": base + rng.normal(0, 0.05, 60)})
    rows += _rows("frozenlake_random", {"grpo": base[:30]})  # only seeds 0-29 of GRPO so far
    records = {r["contrast"]: r for r in analyse(rows, "primary", resamples=4000)}
    h1, h2 = records["H1 frozenlake_random"], records["H2 frozenlake_random"]
    assert h1["n"] == 30 and h1["verdict"] == "reproduced (provisional)"
    assert h2["n"] == 60 and h2["verdict"] == "reproduced"  # a huge gain: reproduced however the rest ends
    # H2's reported Holm p treats the 7 others (H1 included) as p = 1: its rank is first, so 8 times its p
    assert h2["holm_p"] == pytest.approx(min(1.0, 8 * h2["p"]))


def test_each_arm_gets_its_mean_and_a_ci_that_covers_it():
    rows = _rows("frozenlake_random", {"gigpo": np.array([0.2, 0.4, 0.6]), "grpo": np.array([0.5, 0.5])})
    records = {r["arm"]: r for r in study.arm_means(SPEC, rows)}
    assert records["gigpo"]["n"] == 3 and records["grpo"]["n"] == 2
    value, low, high = records["gigpo"]["eval_auc"]
    assert value == pytest.approx(0.4) and 0.2 <= low < value < high <= 0.6
    assert records["gigpo"]["eval_final"][0] == pytest.approx(0.2)  # the other metric, its own values
    assert records["grpo"]["eval_auc"] == pytest.approx([0.5, 0.5, 0.5])  # constant: a zero-width CI
    assert arm_table(SPEC, study.arm_means(SPEC, rows))[2].startswith(
        "| frozenlake_random | gigpo | 3 | 0.400 ["
    )


def test_the_reported_families_are_analysed_without_verdicts_and_count_equal_pairs():
    """The controls and the other estimators (PREREGISTRATION.md, "Controls and secondary contrasts"): each
    family gets its own Holm correction and no verdict. On the no-repeat env GiGPO equals GRPO bit for bit, and
    the equal-pair count says whether it did; the estimators' family is Holm over its 7 contrasts."""
    rng = np.random.default_rng(7)
    n = 60
    base = rng.uniform(0.2, 0.5, n)
    centred = rng.normal(0, 1, n)
    centred -= centred.mean()
    rows = _rows(
        "frozenlake_random",
        {
            "gigpo_no_repeat": base,
            "grpo_no_repeat": np.where(np.arange(n) == 4, base + 0.01, base),  # one seed differs: a bug
            "gigpo": base + 0.2,
            "ppo": base + rng.normal(0, 0.02, n),  # GiGPO a true +0.2 ahead of PPO
            "graphgpo": base + 0.2 + 0.02 * centred,  # a difference of exactly 0 on average
        },
    )
    no_repeat = analyse(rows, "no_repeat", confirmatory=False, resamples=2000)
    assert no_repeat[0]["equal"] == n - 1 and no_repeat[0]["verdict"] is None
    assert "| 59 |" in contrast_table(no_repeat)[2]
    records = {r["contrast"]: r for r in analyse(rows, "estimators", confirmatory=False, resamples=2000)}
    assert len(records) == 7 and {r["verdict"] for r in records.values()} == {None, "not run"}
    ppo, graph = records["gigpo vs ppo"], records["gigpo vs graphgpo"]
    assert ppo["mean_difference"] == pytest.approx(0.2, abs=0.01) and ppo["equal"] == 0
    # Holm over the family of 7, the 5 that have not run at p = 1: the smaller p is multiplied by 7
    assert ppo["holm_p"] == pytest.approx(min(1.0, 7 * ppo["p"]))
    assert graph["holm_p"] >= graph["p"] > 0.5 and graph["ci"][0] < 0 < graph["ci"][1]
    # analysed as confirmatory, the same family would get verdicts: the flag is what removes them
    confirmed = analyse(rows, "estimators", resamples=2000, confirmatory=True)
    assert {r["contrast"]: r["verdict"] for r in confirmed}["gigpo vs ppo"] == "reproduced"


def test_the_llm_checks_runs_are_the_llm_familys_sides():
    """The LLM check's command (PREREGISTRATION.md) names no setting: its job keys map to the setting and arms
    that the ``llm`` family contrasts."""
    key = (
        "+experiments/arm=grpo experiments=smollm2_textworld_coin seed=3 "
        "tracking.experiment=gigpo-study-llm tracking.uri=sqlite:////s/study.db"
    )
    names = study_runs.legacy_names(SPEC)
    assert names[study_runs.legacy_label(key.split())] == ("llm_coin", "grpo")
    (family,) = [f for f in SPEC.families if f.name == "llm"]
    assert family.expanded() == [("LLM check", "llm_coin", ("gigpo",), ("grpo",))]


def test_a_rerun_of_an_arm_under_another_name_counts_its_identical_seeds():
    """The ω grid's ends rerun the primary arms (``SAME_RUNS``): a seed counts as identical only if every
    metric agrees; a setting where only the copy ran is not reported."""
    omega1, gigpo = SAME_RUNS[0]
    rows = _rows("frozenlake_random", {omega1: np.arange(5) / 10, gigpo: np.arange(5) / 10})
    rows += _rows("frozenlake8x8", {omega1: np.arange(3) / 10})
    for r in rows:
        r.update(greedy_success=None, env_steps=1000)
    differs = next(r for r in rows if r["arm"] == gigpo and r["seed"] == 2)
    differs["env_steps"] = 1001  # same success, another number of env steps: not the same run
    del rows[rows.index(next(r for r in rows if r["arm"] == omega1 and r["seed"] == 4))]
    assert study.same_runs(rows, omega1, gigpo) == [
        {
            "setting": "frozenlake_random",
            "copy": omega1,
            "original": gigpo,
            "n": 4,
            "same": 3,
            "metrics": list(study_runs.METRICS),
        }
    ]
    assert SAME_RUNS[1] == (_omega("0.0"), "grpo")


def test_a_prior_analysis_gives_back_the_same_contrasts_without_its_runs():
    """A store that is lost leaves its analysis.json: every contrast recomputed from its per-seed sides gets
    the same numbers, the sides of one arm become rows again, and a side of several arms is used as it is."""
    rng = np.random.default_rng(3)
    n = 12
    base = rng.uniform(0.3, 0.6, n)
    rows = _rows(
        "frozenlake_random", {"gigpo": base + 0.1, "grpo": base, "rloo": base + rng.normal(0, 0.1, n)}
    )
    omega = rng.uniform(0.2, 0.5, n)
    weights = ("0.0", "0.5", "1.0", "1.5", "2.0")
    rows += _rows("frozenlake_random", {_omega(w): omega + rng.normal(0, 0.05, n) for w in weights})
    prior = {
        f"{family}/{metric}": analyse(rows, family, metric, resamples=500, planned=n)
        for family in ("primary", "omega")
        for metric in ("eval_auc", "eval_final")
    }
    sides = study_runs.prior_sides(prior)
    assert prior["omega/eval_auc"][0]["n"] == n  # the ω family ran on random maps: its sides average arms
    for name in prior:
        family, metric = name.split("/")
        again = analyse([], family, metric, resamples=500, planned=n, prior=sides)
        assert again == prior[name]
    recovered = study_runs.rows_from_sides(sides)
    assert {r["arm"] for r in recovered} == {"gigpo", "grpo", "rloo"}  # the ω sides average 3 and 2 arms
    key = ("setting", "arm", "seed", "eval_auc", "eval_final")
    original = [r for r in rows if r["arm"] in ("gigpo", "grpo", "rloo")]
    assert sorted(tuple(r[k] for k in key) for r in recovered) == sorted(
        tuple(r[k] for k in key) for r in original
    )
    assert all(r["recovered"] and r["env_steps"] is None and r["run_id"] is None for r in recovered)
    # a side two contrasts share must agree in both on every seed, or the prior is not one analysis
    assert prior["primary/eval_auc"][2]["contrast"] == "H3 frozenlake_random"
    prior["primary/eval_auc"][2]["a_values"][0] += 0.5  # H3's gigpo, also H1's
    with pytest.raises(ValueError, match="seed 0: two values"):
        study_runs.prior_sides(prior)


def test_a_side_shared_by_contrasts_of_different_seeds_is_recovered_on_all_of_them():
    """A side keeps only the seeds it shares with each partner: a partner short of seeds (a provisional
    analysis) gives it fewer, which is not a conflict, and the side recovers the union."""
    rng = np.random.default_rng(4)
    base = rng.uniform(0.3, 0.6, 10)
    rows = _rows("frozenlake_random", {"gigpo": base + 0.1, "grpo": base})
    rows += _rows("frozenlake_random", {"rloo": base[:4]})
    records = analyse(rows, "primary", resamples=200, planned=10)
    assert [r["n"] for r in records[:3:2]] == [10, 4]  # H1 on all 10 seeds, H3 on 4
    sides = study_runs.prior_sides({"primary/eval_auc": records})
    assert sides[("frozenlake_random", ("gigpo",), "eval_auc")] == {s: v for s, v in enumerate(base + 0.1)}


def test_sides_take_rows_where_every_arm_ran_a_seed_and_the_prior_elsewhere():
    """Per seed: rows win where every arm of the side finished it; other seeds keep the prior's value, so a
    few new seeds of some arms never shrink a side the prior held whole."""
    arms = (_omega("0.5"), _omega("1.5"))
    prior = {("frozenlake8x8", arms, "eval_auc"): {0: 0.5, 1: 0.5, 2: 0.5}}
    rows = _rows("frozenlake8x8", {arms[0]: np.array([0.2, 0.4]), arms[1]: np.array([0.6])})
    assert study.side_values(rows, "frozenlake8x8", arms, "eval_auc", prior) == {0: 0.4, 1: 0.5, 2: 0.5}
    assert study.side_values(rows, "frozenlake8x8", arms, "eval_auc") == {0: 0.4}


def test_rows_are_saved_read_back_and_merged_once_each(tmp_path):
    rows = _rows("frozenlake8x8", {"gigpo": np.array([0.25, 0.5])})
    rows[0].update(run_id="abc", wall_s=None, env_steps=30016)
    study_runs.save_rows(tmp_path / "rows.json", rows)
    assert study_runs.load_rows(tmp_path / "rows.json") == rows
    study_runs.save_rows(tmp_path / "none.json", [])
    assert study_runs.load_rows(tmp_path / "none.json") == []
    # the same run from a store and a rows file counts once; two different rows of one run are an error
    merged, notes = study_runs.merge(rows, study_runs.load_rows(tmp_path / "rows.json"))
    assert merged == rows
    assert notes == [f"frozenlake8x8 / gigpo / {seed}: read twice, counted once" for seed in (0, 1)]
    other = [dict(rows[1], eval_auc=0.9)]
    with pytest.raises(ValueError, match="frozenlake8x8 / gigpo / 1: two different rows"):
        study_runs.merge(rows, other)


def test_a_copy_that_did_not_run_on_a_reused_setting_takes_its_originals_row():
    """REUSED: the ω grid's ends take the primary arms' rows on 8×8 where they did not run, and nowhere else;
    a reused row is never counted as a rerun nor as a run of its arm, and a copy that ran keeps its own row."""
    omega1, gigpo = SAME_RUNS[0]
    omega0, grpo = SAME_RUNS[1]
    rows = _rows(
        "frozenlake8x8", {gigpo: np.arange(4) / 10, grpo: np.arange(4) / 20, omega1: np.array([0.9])}
    )
    rows += _rows("frozenlake_random", {gigpo: np.arange(4) / 10})
    for r in rows:
        r.update(greedy_success=None, env_steps=1000)
    out = study_runs.reuse(SPEC, rows)
    added = out[len(rows) :]
    assert out[: len(rows)] == rows
    assert sorted((r["arm"], r["seed"], r["reused"]) for r in added) == sorted(
        [(omega1, s, gigpo) for s in (1, 2, 3)] + [(omega0, s, grpo) for s in range(4)]
    )
    assert all(r["setting"] == "frozenlake8x8" for r in added)
    by = {(r["arm"], r["seed"]): r for r in out}
    assert by[(omega0, 2)]["eval_auc"] == by[(grpo, 2)]["eval_auc"] == 0.1
    assert by[(omega1, 0)]["eval_auc"] == 0.9  # it ran: its own value, not gigpo's 0.0
    # the one seed that ran differs from its original; the reused ones are not compared at all
    assert study.same_runs(out, omega1, gigpo) == [
        {
            "setting": "frozenlake8x8",
            "copy": omega1,
            "original": gigpo,
            "n": 1,
            "same": 0,
            "metrics": list(study_runs.METRICS),
        }
    ]
    assert study.same_runs(out, omega0, grpo) == []
    assert {(r["setting"], r["arm"]): r["n"] for r in study.arm_means(SPEC, out)}[
        ("frozenlake8x8", omega1)
    ] == 1
    assert ("frozenlake8x8", omega0) not in {(r["setting"], r["arm"]) for r in study.arm_means(SPEC, out)}


def test_a_rerun_is_compared_on_every_metric_but_those_a_recovered_row_lacks():
    """A row recovered from a prior analysis holds two metrics: its rerun is compared on those two, and says
    so. A metric missing from a row that ran is compared, and differs."""
    omega0, grpo = SAME_RUNS[1]
    rows = _rows("frozenlake8x8", {grpo: np.array([0.1, 0.2]), omega0: np.array([0.1, 0.3])})
    for r in rows:
        r.update(greedy_success=0.5, env_steps=30000, recovered=r["arm"] == grpo)
        if r["recovered"]:
            r.update(greedy_success=None, env_steps=None)
    assert study.same_runs(rows, omega0, grpo) == [
        {"setting": "frozenlake8x8", "copy": omega0, "original": grpo, "n": 2, "same": 1,
         "metrics": ["eval_final", "eval_auc"]}
    ]  # fmt: skip
    for r in rows:
        r.update(recovered=False)  # a real run that logged no greedy_success is not the same as one that did
    assert study.same_runs(rows, omega0, grpo)[0]["same"] == 0


def test_the_command_reruns_an_analysis_from_its_json_and_saved_rows(tmp_path):
    """``--prior`` and ``--rows`` without a store: the contrasts come back the same, a new run in the rows
    joins them, and rows.json keeps only the rows that were read (a prior's rows are in its analysis.json)."""
    import json

    import yaml

    from gigpo_lab.study.cli import main

    raw = yaml.safe_load(load_spec("gigpo_claims").path.read_text())
    raw.update(seeds={"start": 0, "stop": 8}, analysis={"seed": 1, "resamples": 500})
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(raw))
    rng = np.random.default_rng(5)
    base = rng.uniform(0.3, 0.6, 8)
    first = _rows("frozenlake_random", {"gigpo": base + 0.2, "grpo": base})
    for r in first:
        r.update(run_id=None, wall_s=None, greedy_success=None, env_steps=None)
    study_runs.save_rows(tmp_path / "first.json", first)
    spec = str(tmp_path / "small.yaml")
    assert (
        main(
            [
                "analyse",
                spec,
                "--rows",
                str(tmp_path / "first.json"),
                "--report",
                str(tmp_path / "a"),
                "--quiet",
            ]
        )
        == 0
    )
    before = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert study_runs.load_rows(tmp_path / "a" / "rows.json") == first
    later = _rows("frozenlake_random", {"rloo": base + 0.1})
    for r in later:
        r.update(run_id="r", wall_s=1.0, greedy_success=None, env_steps=100)
    study_runs.save_rows(tmp_path / "later.json", later)
    argv = ["--prior", str(tmp_path / "a" / "analysis.json"), "--rows", str(tmp_path / "later.json")]
    assert main(["analyse", spec, *argv, "--report", str(tmp_path / "b"), "--quiet"]) == 0
    after = json.loads((tmp_path / "b" / "analysis.json").read_text())
    # H1 comes back from the prior's per-seed sides with the same statistics (its Holm p may move: H3 now ran)
    h1 = [{k: v for k, v in r.items() if k not in ("holm_p", "verdict")} for r in (
        next(r for r in result["primary/eval_auc"] if r["contrast"] == "H1 frozenlake_random")
        for result in (before, after))]  # fmt: skip
    assert h1[0] == h1[1] and h1[0]["n"] == 8
    h3 = next(r for r in after["primary/eval_auc"] if r["contrast"] == "H3 frozenlake_random")
    assert h3["n"] == 8 and h3["mean_difference"] == pytest.approx(0.1)
    assert study_runs.load_rows(tmp_path / "b" / "rows.json") == later
    assert [(a["arm"], a["n"]) for a in after["arms"]] == [("gigpo", 8), ("grpo", 8), ("rloo", 8)]
    assert (tmp_path / "b" / "forest.png").stat().st_size > 0 and (
        tmp_path / "b" / "pairs-primary.png"
    ).is_file()
