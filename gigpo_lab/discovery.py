"""Find what a package's modules declare, so that adding an estimator or an env touches its own files only.

``package_modules("gigpo_lab.algorithm")`` imports every module of the package (its ``__path__``, so a
folder appended there counts too; sub-packages and ``_private`` modules are skipped). Importing an estimator
module registers its class (``@register_estimator``); importing an env module registers its gymnasium id.
``declared_schemas`` collects the ``SCHEMAS`` dicts (``{"<group>/<option>": dataclass}``) the modules
declare next to their class, for Hydra's ConfigStore (``gigpo_lab.config_paths.register_schemas``).
Plain Python: no Hydra import.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def package_modules(package: str) -> list[ModuleType]:
    """Every module of ``package``, imported (already imported ones are not re-run), in name order."""
    pkg = importlib.import_module(package)
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.ispkg)
    return [importlib.import_module(f"{package}.{n}") for n in names if not n.startswith("_")]


def declared_schemas(package: str) -> dict[str, type]:
    """The union of the ``SCHEMAS`` dicts that the modules of ``package`` declare."""
    found: dict[str, type] = {}
    for module in package_modules(package):
        found.update(getattr(module, "SCHEMAS", None) or {})
    return found
