"""The base schema of the ``env`` config group: the keys ``make_env`` itself takes. Each env module declares
its own schema on it (a dataclass with that env's keyword arguments and their defaults, ``SCHEMAS`` there).

``conf/env/<option>.yaml`` extends one of them (``defaults: [/schema/env/<schema>@_here_, _self_]``) and
sets only what differs: ``name``, ``id``, ``max_turns`` and the env's own values. A misspelt key or a value
of the wrong type or outside a choice fails when the config is composed. Registered by
``gigpo_lab.config_paths.register_schemas`` under ``schema/env/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from gigpo_lab.algorithm.settings import param
from gigpo_lab.choices import default_of
from gigpo_lab.envs.factory import make_env


@dataclass
class EnvConfig:
    """What every env option sets: ``make_env(id, max_turns, action_pattern, name, invalid_reward, **env
    kwargs)``."""

    #: gymnasium.make(id, max_episode_steps=max_turns, **env kwargs) + TextActionWrapper.
    _target_: str = "gigpo_lab.envs.make_env"
    _convert_: str = "all"
    #: Short env name used in run names and tags (stored as env.name; not an env kwarg).
    name: str = MISSING
    #: Registered gymnasium id of the env; an id outside the gigpo_lab namespace goes through the
    #: gym_discrete adapter; "module:Id-v0" imports module first.
    id: str = MISSING
    #: Turns per episode, valid and invalid alike; the turn that reaches it is truncated.
    max_turns: int = param(MISSING, low=1)
    #: Regex with one capture group that extracts the action from the model's text (IGNORECASE, DOTALL;
    #: the last match wins). A bare response equal to an admissible action is accepted too.
    action_pattern: str = default_of(make_env, "action_pattern")
    #: Reward of an invalid turn (the state does not change). In an env that charges every step (CliffWalking:
    #: -1) set it to the step cost, or invalid turns become the cheapest way to spend the episode.
    invalid_reward: float = default_of(make_env, "invalid_reward")
    #: false = the env as it is. true = the no-repeat control, off by default: a number drawn every step (one
    #: in 10^12) is appended to the observation and the anchor, so states never repeat, GiGPO's step groups are
    #: singletons and GiGPO equals GRPO (docs/ALGORITHMS.md, "Controls"). Every env option supports it; not
    #: with estimator.anchor_similarity_threshold (the text clusters would merge the tagged anchors again).
    no_repeat: bool = default_of(make_env, "no_repeat")


#: The base schema, for an env option without keyword arguments of its own; each env module declares its
#: own schema on top of it (``FrozenLakeConfig`` in ``frozenlake.py``, ...).
SCHEMAS: dict[str, type] = {"env/base": EnvConfig}
