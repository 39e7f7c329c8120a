"""The study's files agree with each other: every arm and setting a study or the pilot sweeps exists, the
pre-registered analysis names arms that the study runs, and every arm composes as what its file says."""

from __future__ import annotations

import pytest
from experiment_scripts import EXPERIMENTS, load_script

from gigpo_lab.config_paths import compose_config

ARMS = sorted(p.stem for p in (EXPERIMENTS / "arm").glob("*.yaml"))
SETTINGS = sorted(p.stem for p in (EXPERIMENTS / "study_env").glob("*.yaml"))
STUDIES = ("pilot", "study_primary", "study_arms", "study_omega")


def _params(name: str) -> dict[str, list[str]]:
    cfg = compose_config([f"experiments={name}"], return_hydra_config=True)
    return {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}


@pytest.mark.parametrize("name", STUDIES)
def test_every_swept_arm_and_setting_exists(name):
    params = _params(name)
    assert set(params["+experiments/arm"]) <= set(ARMS)
    assert set(params["+experiments/study_env"]) <= set(SETTINGS)


def test_the_analysis_reads_arms_the_study_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    analysis = load_script("study_analysis.py")
    primary, omega = _params("study_primary"), _params("study_omega")
    # H1 and H3 on three settings, H2 (the placebo) on the two where states repeat within an episode group
    names = [c.name for c in analysis.FAMILIES["primary"]]
    assert len(names) == 8 and "H2 textworld_coin" not in names and "H2 frozenlake8x8" in names
    for c in analysis.FAMILIES["primary"]:
        assert set(c.a + c.b) <= set(primary["+experiments/arm"])
        assert c.setting in primary["+experiments/study_env"]
    # the ω arms are labelled "gigpo estimator.step_advantage_weight=<value as swept>" (study_runs.parse_job_key)
    swept = {analysis._omega(w) for w in omega["estimator.step_advantage_weight"]}
    for c in analysis.FAMILIES["omega"]:
        assert set(c.a + c.b) == swept and not set(c.a) & set(c.b)
        assert c.setting in omega["+experiments/study_env"]
    # the reported families (controls, other estimators, the LLM check) read arms that a study runs, or the
    # LLM check's arms, on the setting that those arms run in
    arms = _params("study_arms")
    for name, family in analysis.REPORTED.items():
        for c in family:
            if name == "llm":
                assert set(c.a + c.b) <= set(ARMS) and c.setting == "default"
                continue
            assert set(c.a + c.b) <= set(primary["+experiments/arm"]) | set(arms["+experiments/arm"])
            assert [c.setting] == arms["+experiments/study_env"]
    # every study runs the same seeds on every arm: the pairs
    assert primary["seed"] == omega["seed"] == _params("study_arms")["seed"] == [str(s) for s in range(60)]


@pytest.mark.parametrize(
    ("arm", "key", "value"),
    [
        ("gigpo_placebo", "estimator.placebo", True),
        ("gigpo_no_repeat", "env.no_repeat", True),
        ("grpo_paper", "estimator.mode", "mean_std_norm"),
        ("grpo_penalty_dose", "estimator.invalid_action_penalty", 0.2),
        ("gigpo_step_index_penalty", "env.invalid_reward", -0.1),
        ("grpo_no_exploration", "exploration._target_", "gigpo_lab.algorithm.exploration.NoBonus"),
    ],
)
def test_an_arm_is_its_estimator_with_one_documented_change(arm, key, value):
    from omegaconf import OmegaConf

    cfg = compose_config([f"+experiments/arm={arm}"])
    got = OmegaConf.select(cfg, key)
    assert (str(got) if isinstance(value, str) else got) == value
