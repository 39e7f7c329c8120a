"""The estimator registry: ``register_estimator("name")`` on a class, then build it by name.

Every module of ``gigpo_lab.algorithm`` is imported before a lookup (``gigpo_lab.discovery``), so a new
estimator module registers itself: nothing else lists the estimators.

The registry refuses duplicate names, and an unknown name lists the valid ones (as verl's
``core_algos.py`` does). ``check_requirements`` lets the trainer fail before the first rollout when the
environment or collector cannot provide a column the estimator needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gigpo_lab.algorithm.base import Estimator
from gigpo_lab.algorithm.prepare import check_columns
from gigpo_lab.algorithm.settings import param_names

_REGISTRY: dict[str, type[Estimator]] = {}


def register_estimator(name: str) -> Callable[[type[Estimator]], type[Estimator]]:
    """Class decorator: register an ``Estimator`` subclass under ``name`` and set its ``name``."""

    def decorate(cls: type[Estimator]) -> type[Estimator]:
        if not (isinstance(cls, type) and issubclass(cls, Estimator)):
            raise TypeError(f"register_estimator({name!r}) decorates Estimator subclasses, got {cls!r}")
        if name in _REGISTRY:
            old = _REGISTRY[name]
            raise ValueError(
                f"estimator name {name!r} is already registered by {old.__module__}.{old.__qualname__}; "
                f"choose another name"
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _discover() -> None:
    """Import every estimator module of the package (each registers its class); cheap once imported."""
    from gigpo_lab.discovery import package_modules

    package_modules("gigpo_lab.algorithm")


def available_estimators() -> tuple[str, ...]:
    """The registered names, sorted."""
    _discover()
    return tuple(sorted(_REGISTRY))


def get_estimator_class(name: str) -> type[Estimator]:
    """The class registered under ``name``; an unknown name raises a ValueError listing the valid ones."""
    if name not in _REGISTRY:
        _discover()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown estimator {name!r}; valid names: {list(available_estimators())}") from None


def estimator_params(name: str) -> tuple[str, ...]:
    """The parameter names the estimator ``name`` accepts, in its schema's order."""
    return param_names(get_estimator_class(name).schema)


def build_estimator(name: str, **params: object) -> Estimator:
    """Instantiate the estimator ``name``; its schema refuses an unknown parameter (a TypeError listing the
    valid ones) or a bad value (``settings.ParamError``)."""
    return get_estimator_class(name)(**params)


def check_requirements(
    name_or_estimator: str | Estimator, available_columns: Iterable[str], **params: object
) -> None:
    """Raise ``MissingColumnError`` if ``available_columns`` lack a column the estimator needs.

    name_or_estimator: a built estimator, or a registered name (built with ``params``, since the needs can
    depend on them: ``anchor_similarity_threshold`` needs ``anchor_texts`` instead of ``anchor_ids``).
    The trainer calls this once, before the first rollout, with the columns its collector fills.
    """
    if isinstance(name_or_estimator, Estimator):
        if params:
            raise TypeError(
                "check_requirements: pass params only with an estimator name, not a built estimator"
            )
        estimator = name_or_estimator
    else:
        estimator = build_estimator(name_or_estimator, **params)
    check_columns(estimator.name, estimator.requires, available_columns)
