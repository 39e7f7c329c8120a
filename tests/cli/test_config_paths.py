"""Compose and instantiate every option of every config group; typos fail at compose time."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from gigpo_lab.config_paths import compose_config, config_groups

GROUPS = config_groups()
OPTIONS = [(g, o) for g, options in GROUPS.items() for o in options]


def test_every_group_of_the_design_exists():
    assert {"estimator", "env", "model", "rollout", "loss", "trainer", "tracking"} <= set(GROUPS)


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_instantiates(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if (group, option) == ("model", "hf"):
        from tests.hf_tiny import build_tiny_hf_model

        overrides.append(f"model.path={build_tiny_hf_model(tmp_path / 'hf')}")
    cfg = compose_config(overrides)
    node = cfg[group]
    if "_target_" in node:
        obj = instantiate(node)
        assert obj is not None
    if group == "estimator":
        from gigpo_lab.algorithm import build_estimator

        est = instantiate(node)
        assert type(est) is type(build_estimator(est.name))


def test_default_config_is_the_documented_default():
    cfg = compose_config()
    assert cfg.estimator._target_.endswith("GiGPO")
    assert cfg.estimator.step_advantage_weight == 1.0
    assert cfg.seed == 0 and cfg.ckpt_path is None


@pytest.mark.parametrize("override", ["estimator=gipgo", "env=nope", "model=gpt5"])
def test_unknown_option_lists_the_valid_ones(override):
    with pytest.raises(ConfigCompositionException) as err:
        compose_config([override])
    assert "Available options" in str(err.value)


@pytest.mark.parametrize("group", ["estimator", "rollout", "loss", "env", "lightning"])
def test_option_lists_show_only_real_options(group):
    """A typo lists every option, the YAML files and the schemas stored as options alike, and nothing else
    (not the ``schema/<group>`` copies, not a ``base``)."""
    with pytest.raises(ConfigCompositionException) as err:
        compose_config([f"{group}=nope"])
    text = str(err.value).split(f"Available options in '{group}':")[1].split("Config search path")[0]
    listed = {line.strip() for line in text.splitlines() if line.strip()}
    assert listed == set(GROUPS[group])


@pytest.mark.parametrize(
    "override",
    ["estimator=gigpo_schema", "loss=ppo_schema", "rollout=torch_schema", "env=base", "rollout=base"],
)
def test_a_schema_is_not_an_option(override):
    with pytest.raises(ConfigCompositionException, match="Could not find"):
        compose_config([override])


@pytest.mark.parametrize(
    ("group", "typo"),
    [("estimator", "step_advantge_weight"), ("loss", "clip_lo"), ("rollout", "temprature")],
)
def test_schema_groups_refuse_a_misspelt_key(group, typo):
    """estimator, loss and rollout are typed by schemas: an experiment file's typo cannot add a silent key."""
    cfg = compose_config()
    with pytest.raises(ConfigKeyError):
        OmegaConf.merge(cfg[group], {typo: 1})


def test_wrong_type_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        compose_config(["estimator.gamma=high"])
