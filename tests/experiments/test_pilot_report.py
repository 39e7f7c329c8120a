"""experiments/pilot_report.py and study_runs.py: a study's runs labelled by setting and arm, the pilot's
spreads, floor and ceiling, and the seeds per arm, on synthetic runs with a known answer."""

from __future__ import annotations

import math

import pytest
from experiment_scripts import EXPERIMENTS, load_script

from gigpo_lab.analysis.power import planning_alpha, seeds_for


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    return load_script("study_runs.py"), load_script("pilot_report.py")


def test_a_job_key_names_its_setting_arm_and_seed(scripts):
    runs, _ = scripts
    key = (
        "+experiments/arm=gigpo_placebo +experiments/study_env=frozenlake8x8 experiments=pilot seed=103 "
        "tracking.uri=sqlite\\:////tmp/p.db"
    )
    assert runs.parse_job_key(key) == ("frozenlake8x8", "gigpo_placebo", 103)
    # an override beyond the arm is part of the arm (the ω study); the store and the study are not
    key = "+experiments/arm=gigpo +experiments/setting=sokoban estimator.step_advantage_weight=0.5 seed=4"
    assert runs.parse_job_key(key) == ("sokoban", "gigpo estimator.step_advantage_weight=0.5", 4)
    with pytest.raises(ValueError, match="no seed"):
        runs.parse_job_key("+experiments/arm=gigpo")


S = "frozenlake_random"  # a setting of the study's primary family


def _rows(diff_a_b: list[float]) -> list[dict]:
    """gigpo = grpo + diff on seeds 0..n-1 on random-map FrozenLake; rloo equal to grpo; all at mid-range."""
    rows = []
    for seed, diff in enumerate(diff_a_b):
        base = 0.4 + 0.02 * seed
        for arm, value in (("gigpo", base + diff), ("grpo", base), ("rloo", base)):
            rows.append({"setting": S, "arm": arm, "seed": seed, "eval_final": value, "eval_auc": value / 2,
                         "greedy_success": 1.0, "wall_s": 10.0 + seed})  # fmt: skip
    return rows


def test_the_power_table_plans_from_the_sd_of_the_paired_differences(scripts):
    _, report = scripts
    diffs = [0.1, 0.0, 0.2, 0.1, 0.05, 0.15]
    rows = _rows(diffs)
    lines, records = report.power_table(rows)
    # the study's primary family on this setting has three contrasts; the placebo arm is absent: 2 remain
    assert {r["contrast"] for r in records} == {"gigpo-grpo", "gigpo-rloo"}
    final = next(r for r in records if r["contrast"] == "gigpo-grpo" and r["metric"] == "eval_final")
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    assert final["pairs"] == 6
    assert final["mean_diff"] == pytest.approx(mean)
    assert final["sd_diff"] == pytest.approx(sd)
    assert final["seeds"]["0.05"] == seeds_for(0.05, sd, planning_alpha(0.05, 2), 0.8)
    # the auc differences are half as large, so half the sd: a quarter of the seeds, roughly
    auc = next(r for r in records if r["contrast"] == "gigpo-grpo" and r["metric"] == "eval_auc")
    assert auc["sd_diff"] == pytest.approx(sd / 2)
    assert auc["seeds"]["0.1"] < final["seeds"]["0.1"]
    assert "Family: 2 contrasts" in lines[0]


def test_pairs_use_only_the_seeds_both_arms_finished(scripts):
    _, report = scripts
    rows = [r for r in _rows([0.1, 0.2, 0.3]) if not (r["arm"] == "grpo" and r["seed"] == 1)]
    assert list(report.pairs(rows, S, "gigpo", "grpo", "eval_final")) == pytest.approx([0.1, 0.3])


def test_floor_and_ceiling_are_reported_only_when_every_arm_is_there(scripts):
    _, report = scripts
    rows = _rows([0.0, 0.0])
    assert report.floor_ceiling(rows) == []
    for r in rows:
        r["eval_final"] = 0.97
    assert report.floor_ceiling(rows) == [f"{S}: every arm at the ceiling on eval/final"]
    rows[0]["eval_final"] = 0.5  # one arm's mean drops below the ceiling
    assert report.floor_ceiling(rows) == []


def test_the_report_has_a_row_per_arm_with_its_median_wall(scripts):
    _, report = scripts
    text, _ = report.report(_rows([0.1, 0.0, 0.2]), ["a note"])
    arms_section = text.split("## Floor and ceiling")[0]
    table = [line for line in arms_section.splitlines() if line.startswith(f"| {S} |")]
    assert [line.split(" | ")[1] for line in table] == ["gigpo", "grpo", "rloo"]
    assert all(line.endswith("| 11 |") for line in table)  # median of 10, 11, 12
    assert "- a note" in text


def test_read_runs_reads_a_real_store(scripts, tmp_path):
    from mlflow.tracking import MlflowClient

    runs, _ = scripts
    uri = f"sqlite:///{tmp_path}/m.db"
    client = MlflowClient(uri)
    eid = client.create_experiment("study")
    made = {}
    for arm, seed, final, status in (("gigpo", 0, 0.5, "FINISHED"), ("grpo", 0, 0.25, "FINISHED"),
                                     ("grpo", 1, 0.9, "FAILED"), ("gigpo", 0, 0.75, "FINISHED")):  # fmt: skip
        key = f"+experiments/arm={arm} +experiments/study_env=fl seed={seed}"
        run = client.create_run(eid, tags={"sweep_job_key": key, "wall_s": "3.5"})
        client.log_metric(run.info.run_id, "eval/final", final)
        client.set_terminated(run.info.run_id, status)
        made.setdefault((arm, seed), []).append(run.info.run_id)
    rows, notes = runs.read_runs(uri, "study")
    assert [(r["arm"], r["seed"], r["eval_final"]) for r in rows] == [("gigpo", 0, 0.75), ("grpo", 0, 0.25)]
    assert rows[0]["run_id"] == made[("gigpo", 0)][1]  # the newer of two finished runs
    assert rows[0]["wall_s"] == 3.5 and rows[0]["eval_auc"] is None
    assert notes == ["fl / gigpo / seed 0: two finished runs, the newer kept"]
    with pytest.raises(SystemExit, match="no experiment 'nope'"):
        runs.read_runs(uri, "nope")
