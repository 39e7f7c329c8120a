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


#: The LLM study's arms (experiments/studies/gigpo_llm_claims.yaml), as the issue names them: the estimator, its
#: normalisation of the episode level (over trajectories or over step rows: "rows") and its mode, and the stream.
LLM_STUDY_ARMS = {
    "gigpo_paper": ("gigpo", "trajectories", "mean_norm", "NoBonus", False),
    "gigpo_paper_std": ("gigpo", "trajectories", "mean_std_norm", "NoBonus", False),
    "grpo_paper": ("grpo", "trajectories", "mean_std_norm", "NoBonus", False),
    "placebo_paper": ("gigpo", "trajectories", "mean_norm", "NoBonus", True),
    "rloo": ("rloo", None, None, "NoBonus", False),
    "gigpo_lab": ("gigpo", "rows", "mean_norm", "NoBonus", False),
    "grpo_lab": ("grpo", "rows", "mean_norm", "NoBonus", False),
    "gigpo_lab_stream": ("gigpo", "rows", "mean_norm", "CountBonus", False),
    "grpo_lab_stream": ("grpo", "rows", "mean_norm", "CountBonus", False),
}


@pytest.mark.parametrize("arm", sorted(LLM_STUDY_ARMS))
def test_the_llm_study_arms_are_the_normalisations_they_name(arm):
    from omegaconf import OmegaConf

    from gigpo_lab.study.spec import load_spec

    spec = load_spec("gigpo_llm_claims").spec
    assert set(spec.arms) == set(LLM_STUDY_ARMS)
    cfg = compose_config(list(spec.arms[arm]))
    estimator, over, mode, stream, placebo = LLM_STUDY_ARMS[arm]
    assert cfg.estimator._target_.rsplit(".", 1)[-1].lower().startswith(estimator)
    assert OmegaConf.select(cfg, "estimator.normalize_over") == over
    assert OmegaConf.select(cfg, "estimator.mode") == mode
    assert cfg.exploration._target_.rsplit(".", 1)[-1] == stream
    assert bool(OmegaConf.select(cfg, "estimator.placebo", default=False)) == placebo


def test_the_llm_study_settings_compose():
    from gigpo_lab.study.spec import load_spec

    spec = load_spec("gigpo_llm_claims").spec
    for name, overrides in spec.settings.items():
        cfg = compose_config(list(overrides))
        assert cfg.env.name, name
    llm = compose_config(list(spec.settings["llm"]))
    assert llm.model._target_.endswith("build_smollm2_policy") and llm.model.lora.enabled
    assert (llm.env.settings.level, llm.trainer.iterations, llm.rollout.eval_temperature) == (2, 2, 1.0)
    # a budget of a few evaluations: eval_final is the last one, not a mean reaching back to the untrained policy
    rooms = compose_config(list(spec.settings["textworld_coin_rooms"]))
    assert llm.trainer.final_window == rooms.trainer.final_window == 1
    # the LLM's untrained evaluation, the same in every arm, is skipped; the tiny text game keeps its curve
    assert not llm.trainer.eval_at_start and rooms.trainer.eval_at_start
    assert rooms.model.mask_inadmissible and rooms.env.settings.level == 8
