"""Each bound of the trainer's, the rollout's and the env's keys is declared once (issue #63): on its schema
field, with ``param(default, low=...)``. ``validate_config`` reads it there (``check_bounds``), ``gigpo-lab
docs`` shows it in the allowed column, and neither the field's ``#:`` help nor ``config_checks.py`` writes it
again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gigpo_lab.algorithm.settings import Interval, bounded_fields
from gigpo_lab.config_paths import all_schemas, compose_config
from gigpo_lab.configdoc.collect import schema_docs
from gigpo_lab.errors import ConfigError
from gigpo_lab.training import config_checks
from gigpo_lab.training.config_checks import COMPONENTS, check_schema_bounds, validate_config

#: The options whose schema is not an object's own (those check their parameters when built).
SCHEMAS = {
    key: schema
    for key, schema in all_schemas().items()
    if key.split("/")[0] not in COMPONENTS and not key.endswith("/base")
}
BOUNDED = [
    (key, name, kind, interval) for key, s in SCHEMAS.items() for name, kind, _, interval in bounded_fields(s)
]


def _outside(kind: type, interval: Interval) -> list[object]:
    """Values just outside ``interval`` (each end that it has)."""
    step = 1 if kind is int else 0.5
    out = []
    if interval.low is not None:
        out.append(interval.low if interval.low_open else interval.low - step)
    if interval.high is not None:
        out.append(interval.high if interval.high_open else interval.high + step)
    return out


def test_the_trainer_rollout_and_env_declare_their_bounds():
    keys = {f"{key.split('/')[0]}.{name}" for key, name, _, _ in BOUNDED}
    assert {"trainer.iterations", "rollout.group_size", "rollout.max_env_error_rate", "env.max_turns"} <= keys


@pytest.mark.parametrize(
    ("option", "name", "bad"),
    [(key, name, bad) for key, name, kind, interval in BOUNDED for bad in _outside(kind, interval)],
    ids=str,
)
def test_a_value_outside_its_bound_is_refused_naming_the_key(option, name, bad):
    group, choice = option.split("/")
    key = f"{group}.{name}"
    cfg = compose_config([f"{group}={choice}", f"{key}={bad}"])
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.* is not allowed; set {re.escape(key)} to "):
        check_schema_bounds(group, cfg[group])  # what validate_config runs (a parent option lacks its id)


def test_validate_config_checks_the_bounds_of_every_group():
    for key in ("trainer.checkpoint_every=0", "rollout.top_p=1.5", "env.max_turns=0"):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key.split('=')[0])}=.* is not allowed"):
            validate_config(compose_config([key]))


def _restates(text: str, interval: Interval) -> bool:
    """Whether ``text`` writes an end of ``interval`` as a bound (``>= 1``, ``> 0``, ``(0, 1]``, ``<= 1``)."""
    ends = [(interval.low, r">=?\s*{:g}\b", r"[\[(]{:g},"), (interval.high, r"<=?\s*{:g}\b", r", {:g}[\])]")]
    return any(
        re.search(pattern.format(end), text)
        for end, *patterns in ends
        if end is not None
        for pattern in patterns
    )


def test_no_bound_is_written_in_the_help_or_in_config_checks():
    """The help says what a key does; the bound is the docs' allowed column, read from the field. This holds
    for every group, the estimators', exploration's and group filter's included."""
    every = {key: s for key, s in all_schemas().items() if not key.endswith("/base")}
    twice = [
        f"{key}.{name}: {schema_docs(schema).get(name)}"
        for key, schema in every.items()
        for name, _, _, interval in bounded_fields(schema)
        if _restates(schema_docs(schema).get(name, ""), interval)
    ]
    assert twice == []
    assert _restates("G: envs per group, >= 2", Interval(2)) and _restates("in (0, 1]", Interval(0, 1, True))
    text = Path(config_checks.__file__).read_text()
    named = sorted({f"{key.split('/')[0]}.{name}" for key, name, _, _ in BOUNDED})
    assert [k for k in named if f'"{k}"' in text] == [], (
        "config_checks names a bounded key: read the field's bound"
    )
