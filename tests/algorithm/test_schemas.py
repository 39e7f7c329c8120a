"""The estimator options and their schemas: every schema is its option (no YAML file), composes,
instantiates the registered class, takes its defaults from the constructor, documents every key, and refuses
misspelt keys at compose time."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

from gigpo_lab.algorithm import available_estimators, build_estimator, get_estimator_class
from gigpo_lab.config_paths import all_schemas, config_groups, register_schemas

CONF = Path(__file__).resolve().parents[2] / "conf"
NAMES = available_estimators()
SCHEMAS = {k: v for k, v in all_schemas().items() if k.startswith("estimator/")}
KL_IN_REWARD = {
    "grpo": False,
    "gigpo": False,
    "gigpo_step_index": False,
    "graphgpo": False,
    "hgpo": False,
    "ppo": False,
    "rloo": True,
    "reinforce_pp": True,
}


def compose_estimator(name: str, overrides=(), config_dir: Path = CONF):
    """Compose ``estimator=<name>`` on its own (no primary config needed)."""
    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name=None, overrides=[f"+estimator={name}", *overrides]).estimator


def signature_defaults(name: str) -> dict:
    """The keywords the class takes and their defaults, as ``help`` shows them (read from its schema)."""
    return {k: p.default for k, p in inspect.signature(get_estimator_class(name)).parameters.items()}


def test_every_registered_estimator_has_a_config_and_a_schema():
    assert config_groups()["estimator"] == sorted(NAMES)
    assert not (CONF / "estimator").exists(), "an option equal to its schema needs no YAML file"
    assert sorted(SCHEMAS) == sorted(f"estimator/{n}" for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_config_instantiates_the_registered_class_with_its_defaults(name):
    cfg = compose_estimator(name)
    est = instantiate(cfg)
    assert type(est) is get_estimator_class(name)
    assert est.params == build_estimator(name).params
    assert est.kl_in_reward is KL_IN_REWARD[name] and "kl_in_reward" not in cfg


@pytest.mark.parametrize("name", NAMES)
def test_the_loss_puts_the_kl_where_the_estimator_says_unless_told(name):
    """loss.kl_in_reward null (the default) takes the estimator class's default; true or false overrides it."""
    from gigpo_lab.config_paths import compose_config

    for override, expected in (([], KL_IN_REWARD[name]), (["loss.kl_in_reward=true"], True)):
        cfg = compose_config([f"estimator={name}", *override])
        estimator = instantiate(cfg.estimator)
        assert instantiate(cfg.loss, estimator=estimator).kl_in_reward is expected
    cfg = compose_config([f"estimator={name}", "loss.kl_in_reward=false"])
    assert instantiate(cfg.loss, estimator=instantiate(cfg.estimator)).kl_in_reward is False


@pytest.mark.parametrize("name", NAMES)
def test_schema_and_constructor_agree_on_keys_and_defaults(name):
    """The option is its schema, and the schema is the class's: its keys and defaults are the constructor's."""
    schema = {f.name: f.default for f in dataclasses.fields(SCHEMAS[f"estimator/{name}"])}
    cls = get_estimator_class(name)
    assert schema.pop("_target_") == f"{cls.__module__}.{cls.__qualname__}"
    assert schema == signature_defaults(name)


@pytest.mark.parametrize("name", NAMES)
def test_every_schema_field_is_documented(name):
    from gigpo_lab.configdoc.collect import schema_docs

    docs = schema_docs(SCHEMAS[f"estimator/{name}"])
    assert set(docs) == set(signature_defaults(name))


def test_overrides_reach_the_estimator():
    est = instantiate(
        compose_estimator("gigpo", ["estimator.step_advantage_weight=0.6", "estimator.mode=mean_std_norm"])
    )
    assert est.step_advantage_weight == 0.6 and est.mode == "mean_std_norm"
    est = instantiate(compose_estimator("gigpo", ["estimator.anchor_similarity_threshold=0.9"]))
    assert "anchor_texts" in est.requires and "anchor_ids" not in est.requires
    assert "truncated" not in est.requires, "the config's default is the paper's: no bootstrap"
    est = instantiate(compose_estimator("gigpo", ["estimator.bootstrap_truncated=true"]))
    assert est.bootstrap_truncated and "truncated" in est.requires


def test_a_misspelt_key_fails_at_compose_time(tmp_path):
    """A YAML option that inherits the schema cannot add a key silently, nor can an override."""
    (tmp_path / "estimator").mkdir()
    (tmp_path / "estimator" / "typo.yaml").write_text(
        "defaults:\n  - /schema/estimator/gigpo@_here_\n  - _self_\n\nstep_advantge_weight: 0.5\n"
    )
    with pytest.raises(ConfigCompositionException, match="step_advantge_weight"):
        compose_estimator("typo", config_dir=tmp_path)
    with pytest.raises(ConfigCompositionException, match="step_advantge_weight"):
        compose_estimator("gigpo", ["estimator.step_advantge_weight=0.5"])


def test_a_wrongly_typed_value_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        compose_estimator("gigpo", ["estimator.gamma=high"])
    with pytest.raises(ConfigCompositionException):
        compose_estimator("gigpo_step_index", ["estimator.scale_by_std=maybe"])


def test_a_bad_choice_fails_at_compose_time_with_the_allowed_values():
    with pytest.raises(ConfigCompositionException) as err:
        compose_estimator("gigpo", ["estimator.mode=mean_std"])
    assert "expected one of [mean_norm, mean_std_norm]" in str(err.value.__cause__)
    with pytest.raises(ConfigCompositionException) as err:
        compose_estimator("grpo", ["estimator.episode_singleton=none"])
    assert "expected one of [raw, zero]" in str(err.value.__cause__)


def test_the_count_bonus_schema_takes_every_default_from_the_constructor():
    """One default per setting: the schema's defaults are CountBonus's own; the option exploration=count links
    the two annealing clocks to the run's length (a value of the option, not a second default)."""
    from gigpo_lab.algorithm.exploration import CountBonus, CountBonusConfig

    schema = {f.name: f.default for f in dataclasses.fields(CountBonusConfig) if f.name != "_target_"}
    sig = inspect.signature(CountBonus).parameters
    assert schema == {k: p.default for k, p in sig.items()}
