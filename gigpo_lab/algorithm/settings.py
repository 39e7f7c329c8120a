"""Each parameter declared once: a schema dataclass holds it, and the object, the config and the docs read it.

An estimator, an exploration bonus or a group filter names its schema (``schema = GiGPOSchema``). The schema
is the option's structured config (``estimator=gigpo`` composes it), and each of its fields declares one
parameter, once: its type (an Enum for a choice), its default, the interval of a number (``param``), and its
one ``#:`` line of help (what ``gigpo-lab docs`` writes into docs/CONFIG.md)::

    @dataclass
    class GiGPOSchema(GRPOSchema):
        _target_: str = "gigpo_lab.algorithm.gigpo.GiGPO"
        #: omega, weight of the step-level advantage (paper: 1.0; 0 gives grpo exactly).
        step_advantage_weight: float = param(1.0, low=0.0)

``Configured.__init__(**params)`` checks the given values against the schema (``check_params``: an unknown
name, a wrong type, a value outside its interval or its choices), fills in the defaults and sets one attribute
per field (``self.step_advantage_weight``); ``check`` adds the rules that tie several fields together. So the
class, ``build_estimator``/``compute_advantages`` and Hydra's ``instantiate`` all take the same keywords with
the same defaults, and a refusal is a ``ParamError`` naming the parameter and what it allows, which
``build_checked`` turns into a one-line ``ConfigError`` naming the config key before a run starts.

The config groups that configure no such object (``trainer``, ``rollout``, ``env``) declare their intervals
with ``param`` too; ``validate_config`` checks them with ``check_bounds`` and ``gigpo-lab docs`` shows them
(``bounded_fields``), so each bound is written once, on its field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar


@dataclasses.dataclass(frozen=True)
class Interval:
    """Where a number may lie: ``[low, high]``, each end open or closed, None for unbounded."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __str__(self) -> str:
        left = "(-inf" if self.low is None else f"{'(' if self.low_open else '['}{self.low}"
        right = "inf)" if self.high is None else f"{self.high}{')' if self.high_open else ']'}"
        return f"{left}, {right}"

    def holds(self, x: float) -> bool:
        low_ok = self.low is None or (x > self.low if self.low_open else x >= self.low)
        high_ok = self.high is None or (x < self.high if self.high_open else x <= self.high)
        return math.isfinite(x) and low_ok and high_ok


def param(
    default: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """A schema field: its default, and the interval a real (or, with ``low``, an int) value must lie in."""
    return dataclasses.field(default=default, metadata={"interval": Interval(low, high, low_open, high_open)})


class ParamError(ValueError):
    """A parameter value its schema refuses. ``key`` is the parameter, ``value`` what was given, ``allowed``
    what it may be (``a real number in [0.0, inf)``); ``str`` is the whole sentence."""

    def __init__(self, message: str, key: str, value: object, allowed: str) -> None:
        super().__init__(message)
        self.key, self.value, self.allowed = key, value, allowed


class ParamTypeError(ParamError, TypeError):
    """A value of the wrong type (a ``ValueError`` and a ``TypeError``)."""


# --- one check per kind of value: every error names the owner, the parameter and what is allowed -----------


def allowed_values(kind: type, interval: Interval) -> str:
    """What a number field allows, in words: ``an integer >= 1``, ``a real number in (0.0, 1.0]``."""
    if kind is int:
        return "an integer" if interval.low is None else f"an integer >= {interval.low:g}"
    return f"a real number in {interval}"


def check_choice(owner: str, key: str, value: object, allowed: Sequence[str]) -> str:
    """``value`` (a str or a str-valued Enum, as Hydra passes schema enums) if it is one of ``allowed``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value not in allowed:
        raise ParamError(
            f"{_where(owner)}{key}={value!r} is not valid; expected one of {list(allowed)}",
            key,
            value,
            f"one of {list(allowed)}",
        )
    return str(value)


def check_real(owner: str, key: str, value: object, interval: Interval = Interval()) -> float:
    """``value`` as a float if it is a finite number in ``interval``; the error states the interval."""
    allowed = allowed_values(float, interval)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParamTypeError(f"{_where(owner)}{key} must be {allowed}, got {value!r}", key, value, allowed)
    if not interval.holds(float(value)):
        raise ParamError(f"{_where(owner)}{key}={value!r} is outside {interval}", key, value, allowed)
    return float(value)


def check_int(owner: str, key: str, value: object, interval: Interval = Interval()) -> int:
    """``value`` if it is an int (not a bool) at least ``interval.low``."""
    allowed = allowed_values(int, interval)
    if isinstance(value, bool) or not isinstance(value, int) or not interval.holds(value):
        error = ParamError if isinstance(value, int) and not isinstance(value, bool) else ParamTypeError
        raise error(f"{_where(owner)}{key} must be {allowed}, got {value!r}", key, value, allowed)
    return value


def check_bool(owner: str, key: str, value: object, interval: Interval = Interval()) -> bool:
    """``value`` if it is a bool (a typo such as ``"false"`` would otherwise be truthy)."""
    if not isinstance(value, bool):
        raise ParamTypeError(
            f"{_where(owner)}{key} must be true or false, got {value!r}", key, value, "true or false"
        )
    return value


def _where(owner: str) -> str:
    """The prefix of a message: ``gigpo: `` for an estimator, ``exploration.`` for a config group's key."""
    return owner if owner.endswith(".") else f"{owner}: "


#: The check of each plain field type; an Enum field is a choice among its values.
CHECKS: dict[type, Callable[..., object]] = {bool: check_bool, int: check_int, float: check_real}


# --- reading a schema -----------------------------------------------------------------------------------------


@functools.cache
def schema_fields(schema: type) -> tuple[tuple[dataclasses.Field, Any, bool], ...]:
    """(field, its type, whether None is allowed) for every parameter of ``schema`` (Hydra's ``_target_`` and
    other ``_`` keys aside), in the schema's order."""
    hints = typing.get_type_hints(schema)
    out = []
    for f in dataclasses.fields(schema):
        if f.name.startswith("_"):
            continue
        kind, args = hints[f.name], typing.get_args(hints[f.name])
        optional = type(None) in args
        if optional:
            kind = next(a for a in args if a is not type(None))
        out.append((f, kind, optional))
    return tuple(out)


def bounded_fields(schema: type) -> tuple[tuple[str, Any, bool, Interval], ...]:
    """(name, type, whether None is allowed, interval) of every field of ``schema`` that ``param`` bounds."""
    return tuple(
        (f.name, kind, optional, f.metadata["interval"])
        for f, kind, optional in schema_fields(schema)
        if "interval" in f.metadata
    )


def bound(schema: type, name: str) -> Interval:
    """The interval that ``param`` declares for the field ``name`` of ``schema`` (for a library function that
    takes that field's value as an argument and checks it as the config does)."""
    return next(interval for field, _, _, interval in bounded_fields(schema) if field == name)


def param_names(schema: type) -> tuple[str, ...]:
    """The parameter names ``schema`` declares, in order."""
    return tuple(f.name for f, _, _ in schema_fields(schema))


def defaults(schema: type) -> dict[str, object]:
    """Every parameter's default, checked as a constructor would store it (a choice as its plain str)."""
    return check_params(schema.__name__, schema, {})


def check_params(owner: str, schema: type, given: Mapping[str, object]) -> dict[str, object]:
    """The parameters ``given`` completed with ``schema``'s defaults, each checked against its field: a
    ``ParamError`` (or ``ParamTypeError``) for a refused value, a ``TypeError`` for an unknown name."""
    names = param_names(schema)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(f"{_where(owner)}unknown parameter(s) {unknown}; valid parameters: {list(names)}")
    out: dict[str, object] = {}
    for f, kind, optional in schema_fields(schema):
        out[f.name] = check_value(owner, f, kind, optional, given.get(f.name, f.default))
    return out


def check_value(owner: str, f: dataclasses.Field, kind: Any, optional: bool, value: object) -> object:
    """``value`` checked against its field ``f`` (of type ``kind``): a choice, a number in the field's
    interval, a bool; None where the field is optional (then a refusal's ``allowed`` says ``or null``)."""
    if value is None and optional:
        return None
    try:
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return check_choice(owner, f.name, value, [m.value for m in kind])
        return CHECKS.get(kind, _as_is)(owner, f.name, value, f.metadata.get("interval", Interval()))
    except ParamError as err:
        if optional:
            err.allowed = f"{err.allowed}, or null"
        raise


def _as_is(owner: str, key: str, value: object, interval: Interval) -> object:
    return value


def signature(schema: type) -> inspect.Signature:
    """The keyword-only signature that ``schema`` declares (what ``help`` and an IDE show for the class)."""
    return inspect.Signature(
        [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=kind)
            for f, kind, _ in schema_fields(schema)
        ]
    )


@dataclasses.dataclass
class NoParams:
    """The schema of an object without parameters."""


class Configured:
    """An object whose parameters its ``schema`` declares (module docstring): ``__init__(**params)`` checks
    them, fills in the defaults, keeps them in ``params`` and sets one attribute each; then ``check`` runs."""

    #: The dataclass that declares the parameters (the config option's schema).
    schema: ClassVar[type] = NoParams
    #: Who refuses a value, in its messages: ``"exploration."`` names config keys, ``"gigpo"`` an estimator.
    owner: ClassVar[str] = ""

    def __init__(self, **params: object) -> None:
        self.params: dict[str, object] = check_params(self.owner, self.schema, params)
        vars(self).update(self.params)
        self.check()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = signature(cls.schema)  # type: ignore[attr-defined]

    def check(self) -> None:
        """Rules that tie several parameters together (each alone is checked already); raise a ValueError."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def build_checked(group: str, node: Mapping[str, object], target: type) -> object:
    """``target(**node)`` (the ``_`` keys of a config node aside), its refusal re-raised as a ``ConfigError``
    of one line that names the config key ``<group>.<key>`` and what it allows. For ``validate_config``."""
    from gigpo_lab.errors import ConfigError

    params = {k: v for k, v in node.items() if not str(k).startswith("_")}
    try:
        return target(**params)
    except ParamError as err:
        raise refusal(group, err) from None
    except (TypeError, ValueError) as err:  # a rule across parameters: its message names the keys and the fix
        raise ConfigError(str(err)) from None


def check_bounds(group: str, schema: type, node: Mapping[str, object]) -> None:
    """Each value of ``node`` (a config node of ``schema``) that ``param`` bounds, checked against its field;
    a refusal is the one-line ``ConfigError`` of ``build_checked``, naming ``<group>.<key>``. For the config
    groups whose schema is not an object's (the trainer's, the rollout's, the env's)."""
    fields = {f.name: (f, kind, optional) for f, kind, optional in schema_fields(schema)}
    for name, _, _, _ in bounded_fields(schema):
        try:
            check_value(f"{group}.", *fields[name], node[name])
        except ParamError as err:
            raise refusal(group, err) from None


def refusal(group: str, err: ParamError) -> Exception:
    """The ``ConfigError`` of a refused parameter: ``<group>.<key>=<value> is not allowed; set it to ...``."""
    from gigpo_lab.errors import ConfigError

    key = f"{group}.{err.key}"
    return ConfigError(f"{key}={err.value!r} is not allowed; set {key} to {err.allowed}")
