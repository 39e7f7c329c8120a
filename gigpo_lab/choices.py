"""What a config schema reads from the code: its choices (``choice_enum``) and its defaults (``default_of``).

``choice_enum``: the Enum type of a choice field of a config schema, built from the code's own constants.

A schema field typed with such an Enum makes OmegaConf refuse any other value when the config is composed,
listing the valid ones (``Invalid value 'mean_nrom', expected one of [mean_norm, mean_std_norm]``). The
members are ``StrEnum``s whose names equal their values (OmegaConf matches a config string to a member
name, so ``token-mean`` and ``32-true`` work too), so the constructors receive values that compare, hash
and print like the plain strings they check against. Store ``str(value)`` where a value is saved in a
checkpoint: ``torch.load(weights_only=True)`` loads plain strings, not Enum members.

``default_of``: a schema field's default read from the signature of what the option builds, so that each
default is written once, in that signature.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterable


def choice_enum(name: str, values: Iterable[str], module: str) -> type[enum.StrEnum]:
    """A ``StrEnum`` called ``name`` (defined in ``module``, for pickling) with one member per value."""
    return enum.StrEnum(name, [(str(v), str(v)) for v in values], module=module)


def default_of(target: object, param: str) -> object:
    """The default of ``param`` in ``target``'s signature (a class: its ``__init__``; else the function)."""
    call = target.__init__ if isinstance(target, type) else target
    return inspect.signature(call).parameters[param].default
