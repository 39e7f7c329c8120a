"""The study's files agree with each other: every arm and setting a study or the pilot sweeps exists, the
registered spec names what the study ran, and every arm composes as what its file says."""

from __future__ import annotations

import pytest
from experiment_scripts import EXPERIMENTS

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


def test_the_spec_names_the_arms_and_settings_the_study_ran():
    """The registered study's spec (experiments/studies/gigpo_claims.yaml) names, for its FrozenLake and
    TextWorld cells, exactly the arm and setting files the study's sweeps ran, and the same seeds."""
    from gigpo_lab.study.spec import load_spec

    spec = load_spec("gigpo_claims").spec
    primary, arms, omega = _params("study_primary"), _params("study_arms"), _params("study_omega")
    swept_arms = set(primary["+experiments/arm"]) | set(arms["+experiments/arm"])
    for name, overrides in spec.arms.items():
        assert overrides[0].split("=")[1] in swept_arms | set(ARMS), name
    omegas = {ovr[1].split("=")[1] for name, ovr in spec.arms.items() if name.startswith("omega_")}
    assert omegas == set(omega["estimator.step_advantage_weight"])
    settings = {ovr[0].split("=")[1] for name, ovr in spec.settings.items() if name != "llm_coin"}
    assert settings == set(primary["+experiments/study_env"])
    assert primary["seed"] == omega["seed"] == arms["seed"] == [str(s) for s in spec.seeds.values]


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
