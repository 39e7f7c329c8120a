"""Text environments for multi-turn agents; importing this package registers their gymnasium ids.

Every module of the package is imported here (``gigpo_lab.discovery``): an env module registers its own id
(``register_env("gigpo_lab/Name-v0", cls, max_episode_steps=...)``) and declares its schema (``SCHEMAS``),
so a new env is its module and its ``conf/env/`` option, nothing else. ``registered_ids()`` lists the ids:
``gigpo_lab/FrozenLake-v0``, ``gigpo_lab/Sokoban-v0``, ``gigpo_lab/Household-v0`` and the adapter
``gigpo_lab/GymDiscrete-v0``.

Use :func:`make_env` (what ``conf/env/*.yaml`` instantiates): it sets ``max_episode_steps`` to
``max_turns`` and adds the :class:`TextActionWrapper`, which parses the model's text. The info
contract (``anchor``, ``admissible_actions``, ``success``, ``invalid``) is in :mod:`gigpo_lab.envs.base`.
"""

from __future__ import annotations

from gigpo_lab.discovery import package_modules
from gigpo_lab.envs.base import INFO_KEYS, TOKEN_PATTERN, TextEnv, tokenize
from gigpo_lab.envs.factory import make_env, registered_ids
from gigpo_lab.envs.frozenlake import FrozenLakeText
from gigpo_lab.envs.gym_discrete import GymDiscreteText
from gigpo_lab.envs.household import HouseholdText
from gigpo_lab.envs.sokoban import SokobanText
from gigpo_lab.envs.text_actions import DEFAULT_ACTION_PATTERN, TextActionWrapper

package_modules(__name__)  # each env module registers its gymnasium id

__all__ = [
    "DEFAULT_ACTION_PATTERN",
    "INFO_KEYS",
    "TOKEN_PATTERN",
    "FrozenLakeText",
    "GymDiscreteText",
    "HouseholdText",
    "SokobanText",
    "TextActionWrapper",
    "TextEnv",
    "make_env",
    "registered_ids",
    "tokenize",
]
