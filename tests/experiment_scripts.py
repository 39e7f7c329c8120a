"""Load a script of ``experiments/`` as a module, for the tests of its functions (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_script(relative: str) -> ModuleType:
    """The module of ``experiments/<relative>`` (for example ``bench/seed_robustness.py``), executed once."""
    path = EXPERIMENTS / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
