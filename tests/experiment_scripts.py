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


#: The overrides that shrink an LLM experiment to a one-iteration smoke run: 2 groups x 2 two-turn episodes.
LLM_SMOKE = [
    "trainer.iterations=1",
    "rollout.groups=2",
    "rollout.group_size=2",
    "env.max_turns=2",
    "rollout.eval_episodes=2",
    "lightning.progress_bar=false",
]


def llm_smoke_argv(experiment: str, root: Path, png: Path, *overrides: str) -> list[str]:
    """``experiments/llm_learning.py``'s arguments for a smoke run of ``experiment``: its first GiGPO seed alone,
    on one thread, shrunk by ``LLM_SMOKE`` plus ``overrides``, into the store ``root`` and the figure ``png``."""
    return [
        *("--experiment", experiment, "--root", str(root), "--png", str(png)),
        *("--threads", "1", "--only", "gigpo s0", "--"),
        *LLM_SMOKE,
        *overrides,
    ]
