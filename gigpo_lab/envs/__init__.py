"""Text environments for multi-turn agents; importing this package registers their gymnasium ids.

=============================  ===================================  ==================================
id                             class                                default max_episode_steps
=============================  ===================================  ==================================
``gigpo_lab/FrozenLake-v0``    :class:`FrozenLakeText`               100 (gymnasium's FrozenLake 4x4)
``gigpo_lab/Sokoban-v0``       :class:`SokobanText`                  100 (RAGEN's max_steps)
``gigpo_lab/Household-v0``     :class:`HouseholdText`                30
``gigpo_lab/GymDiscrete-v0``   :class:`GymDiscreteText`              200
=============================  ===================================  ==================================

Use :func:`make_env` (what ``conf/env/*.yaml`` instantiates): it sets ``max_episode_steps`` to
``max_turns`` and adds the :class:`TextActionWrapper`, which parses the model's text. The info
contract (``anchor``, ``admissible_actions``, ``success``, ``invalid``) is in :mod:`gigpo_lab.envs.base`.
"""

from __future__ import annotations

import gymnasium as gym

from gigpo_lab.envs.base import INFO_KEYS, TOKEN_PATTERN, TextEnv, tokenize
from gigpo_lab.envs.factory import make_env, registered_ids
from gigpo_lab.envs.frozenlake import FrozenLakeText
from gigpo_lab.envs.gym_discrete import GymDiscreteText
from gigpo_lab.envs.household import HouseholdText
from gigpo_lab.envs.sokoban import SokobanText
from gigpo_lab.envs.text_actions import DEFAULT_ACTION_PATTERN, TextActionWrapper

_REGISTRY = {
    "gigpo_lab/FrozenLake-v0": ("gigpo_lab.envs.frozenlake:FrozenLakeText", 100),
    "gigpo_lab/Sokoban-v0": ("gigpo_lab.envs.sokoban:SokobanText", 100),
    "gigpo_lab/Household-v0": ("gigpo_lab.envs.household:HouseholdText", 30),
    "gigpo_lab/GymDiscrete-v0": ("gigpo_lab.envs.gym_discrete:GymDiscreteText", 200),
}

for _id, (_entry_point, _steps) in _REGISTRY.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry_point, max_episode_steps=_steps)

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
