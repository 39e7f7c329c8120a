"""Each parameter declared once (``gigpo_lab/algorithm/settings.py``): the schema is what the class takes, checks
and defaults to; the config check builds the estimator, the exploration bonus and the group filter, so a bad
value is refused by its class, with its config key, before a run; ``validate_config`` keeps the cross-group
rules only."""

from __future__ import annotations

import dataclasses
import inspect
import sys

import pytest

from gigpo_lab.algorithm import available_estimators, get_estimator_class
from gigpo_lab.algorithm.exploration import CountBonus, CountBonusConfig
from gigpo_lab.algorithm.group_filter import NonConstant, TopStd
from gigpo_lab.algorithm.settings import ParamError, defaults, param_names
from gigpo_lab.config_paths import compose_config
from gigpo_lab.errors import ConfigError
from gigpo_lab.training.config_checks import validate_config

CONFIGURED = [get_estimator_class(n) for n in available_estimators()] + [CountBonus, NonConstant, TopStd]


@pytest.mark.parametrize("cls", CONFIGURED, ids=lambda c: c.__name__)
def test_the_class_takes_what_its_schema_declares(cls):
    """Keywords, defaults and the attributes set are the schema's: nothing is written twice."""
    built = cls()
    assert list(inspect.signature(cls).parameters) == list(param_names(cls.schema))
    assert built.params == defaults(cls.schema)
    assert all(getattr(built, k) == v for k, v in built.params.items() if v is not None)
    with pytest.raises(TypeError, match="unknown parameter.*'no_such_key'"):
        cls(no_such_key=1)


def test_a_choice_is_stored_as_its_plain_string():
    """Hydra passes a schema Enum member; the object keeps the str (a checkpoint loads plain strings)."""
    from gigpo_lab.algorithm.base import Mode

    gigpo = get_estimator_class("gigpo")(mode=Mode["mean_std_norm"])
    assert type(gigpo.mode) is str and gigpo.params["mode"] == "mean_std_norm"


@pytest.mark.parametrize(
    ("cls", "params", "error", "message"),
    [
        (TopStd, {"share": 0.0}, ValueError, r"group_filter.share=0.0 is outside \(0.0, 1.0\]"),
        (TopStd, {"share": "half"}, TypeError, r"group_filter.share must be a real number in \(0.0, 1.0\]"),
        (
            NonConstant,
            {"max_collections": 0},
            ValueError,
            "group_filter.max_collections must be an integer >= 1",
        ),
        (CountBonus, {"dose_floor": 0.0}, ValueError, r"exploration.dose_floor=0.0 is outside \(0.0, inf\)"),
        (CountBonus, {"first_visit": 1}, TypeError, "exploration.first_visit must be true or false"),
    ],
)
def test_the_classes_refuse_a_bad_value_naming_the_key(cls, params, error, message):
    with pytest.raises(error, match=message) as err:
        cls(**params)
    assert isinstance(err.value, ParamError) and err.value.key == next(iter(params))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["estimator.gamma=1.5"],
            r"estimator.gamma=1.5 is not allowed; set estimator.gamma to a real number in",
        ),
        (["estimator=hgpo", "estimator.history_length=-1"], "estimator.history_length=-1 is not allowed"),
        (["exploration.anneal=-1"], "set exploration.anneal to an integer >= 0"),
        (
            ["group_filter=top_std", "group_filter.share=1.5"],
            r"set group_filter.share to a real number in \(0.0",
        ),
        (
            ["group_filter=nonconstant", "group_filter.max_collections=0"],
            "set group_filter.max_collections to",
        ),
        (  # the one rule across two parameters of one estimator, stated by the estimator
            ["estimator.bootstrap_truncated=true", "estimator.gamma=1"],
            "gigpo: bootstrap_truncated needs gamma < 1.*set estimator.gamma below 1",
        ),
        (  # a rule across two groups stays in validate_config
            ["group_filter=top_std", "group_filter.share=0.1", "rollout.groups=4"],
            r"group_filter.share=0.1 keeps int\(0.1 x rollout.groups=4\) = 0 groups; set group_filter.share to at "
            "least 1/4",
        ),
    ],
)
def test_the_config_check_builds_the_objects_and_says_the_fix_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate_config(compose_config(overrides))
    assert "\n" not in str(err.value)


def test_the_config_check_builds_them_without_torch():
    """The constructors import nothing heavy: the check runs where a config mistake is reported."""
    import subprocess

    code = (
        "import sys\n"
        "from gigpo_lab.config_paths import compose_config\n"
        "from gigpo_lab.training.config_checks import validate_config\n"
        "validate_config(compose_config(['estimator=hgpo', 'group_filter=top_std']))\n"
        "print([m for m in ('torch', 'lightning', 'mlflow') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_the_count_bonus_schema_is_the_one_place_of_its_defaults():
    """exploration=count sets the clocks to the run's length (a value of the option, not a second default)."""
    schema = {f.name: f.default for f in dataclasses.fields(CountBonusConfig) if f.name != "_target_"}
    bonus = CountBonus()
    assert {k: bonus.params[k] for k in schema} == schema
