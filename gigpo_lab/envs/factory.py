"""``make_env``: the one constructor that Hydra's ``env`` group instantiates.

``_target_: gigpo_lab.envs.make_env`` with ``id``, ``max_turns``, ``action_pattern``, ``name`` and the
env's own keyword arguments. It builds ``gymnasium.make(id, max_episode_steps=max_turns, **kwargs)``
and wraps it in a :class:`~gigpo_lab.envs.text_actions.TextActionWrapper`.

Routing goes by the registry, never by substrings of names: an id in the ``gigpo_lab`` namespace is
made as is; any other id that gymnasium knows is adapted by ``gigpo_lab/GymDiscrete-v0`` (its
kwargs are then ``kwargs``, ``action_names``, ``renderer``, ``success_on``, ``max_obs_chars``).
Bad input fails here, before any rollout, with a message that names the fix.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from gigpo_lab.envs.no_repeat import NuisanceTokenWrapper
from gigpo_lab.envs.text_actions import DEFAULT_ACTION_PATTERN, TextActionWrapper

NAMESPACE = "gigpo_lab"
ADAPTER_ID = "gigpo_lab/GymDiscrete-v0"


def register_env(env_id: str, entry_point: type, max_episode_steps: int) -> None:
    """Register an env class under ``env_id`` with gymnasium, once; an env module calls it when imported
    (``gigpo_lab.envs`` imports every module of the package, so a new env module needs no other edit)."""
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_episode_steps)


def registered_ids() -> list[str]:
    """The ids registered in the ``gigpo_lab`` namespace."""
    return sorted(i for i, spec in gym.registry.items() if spec.namespace == NAMESPACE)


def _plain(value: Any) -> Any:
    """OmegaConf containers (or any mapping / sequence) -> dict / list, recursively."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value


def _import_module_of(env_id: Any) -> Any:
    """gymnasium's ``"module:EnvName-v0"`` form: import ``module`` (which registers the id); the bare id."""
    if not isinstance(env_id, str) or ":" not in env_id:
        return env_id
    module, _, bare = env_id.partition(":")
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ValueError(
            f"Env id {env_id!r}: module {module!r} does not import ({err}). Install the package that provides "
            "it (for MiniGrid's ids: `pip install 'gigpo_lab[minigrid]'`), or put the folder that holds it on "
            "PYTHONPATH, e.g. `PYTHONPATH=. gigpo-lab train env.id=...`."
        ) from err
    return bare


def _check_id(env_id: Any) -> gym.envs.registration.EnvSpec:
    if not isinstance(env_id, str) or env_id not in gym.registry:
        close = difflib.get_close_matches(str(env_id), list(gym.registry), n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(
            f"Unknown env id {env_id!r}.{hint} Registered gigpo_lab ids: {registered_ids()}. Any other "
            "gymnasium id with a Discrete action space also works (through gigpo_lab/GymDiscrete-v0)."
        )
    return gym.spec(env_id)


def _check_kwargs(env_id: str, spec: gym.envs.registration.EnvSpec, kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments that the env's constructor does not take, listing the valid ones."""
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    params = inspect.signature(creator).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL and n != "env_id"]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise TypeError(
            f"Unknown kwargs {unknown} for env {env_id!r}. Valid kwargs: {sorted(valid)} "
            "(plus make_env's own: id, max_turns, action_pattern, name). Remove or rename them in the env config."
        )


def make_env(
    id: str,
    max_turns: int,
    action_pattern: str = DEFAULT_ACTION_PATTERN,
    name: str | None = None,
    invalid_reward: float = 0.0,
    no_repeat: bool = False,
    **kwargs: Any,
) -> gym.Wrapper:
    """Make a text env that parses model text: ``gymnasium.make`` + :class:`TextActionWrapper`.

    Args:
        id: a registered gigpo_lab id (``gigpo_lab/FrozenLake-v0``, ``gigpo_lab/Sokoban-v0``,
            ``gigpo_lab/Household-v0``, ``gigpo_lab/GymDiscrete-v0``) or any other gymnasium id with a
            Discrete action space, which is then adapted by ``gigpo_lab/GymDiscrete-v0``. As in
            ``gymnasium.make``, ``"module:EnvName-v0"`` first imports ``module`` (which registers the id).
        max_turns: turns per episode, valid and invalid alike; the wrapper truncates at this turn and
            the same value is gymnasium's ``max_episode_steps``.
        action_pattern: regex with one capture group that extracts the action from the model's text.
        name: short env name for run names; stored as ``env.name`` and not passed to the env
            (default: the id's name, lower-cased, e.g. ``frozenlake``).
        invalid_reward: the reward of an invalid turn (``TextActionWrapper``); default 0.
        no_repeat: False (the default) or True, a control: a :class:`NuisanceTokenWrapper` around the
            ``TextActionWrapper`` appends a number drawn every step to the observation and the anchor, so
            states never repeat (``gigpo_lab/envs/no_repeat.py``).
        **kwargs: the env's constructor arguments (see each env class).

    Raises:
        ValueError: unknown id (the message lists the gigpo_lab ids), a bad value, or a renderer
            path that does not import.
        TypeError: a kwarg the env does not take (the message lists the valid ones).
    """
    kwargs = _plain(kwargs)
    id = _import_module_of(id)
    spec = _check_id(id)
    if spec.namespace == NAMESPACE:
        target, ctor_kwargs = id, kwargs
    else:
        if "env_id" in kwargs:
            raise TypeError(f"Give the gymnasium id once, as id={id!r}; drop env_id={kwargs['env_id']!r}.")
        target, ctor_kwargs = ADAPTER_ID, {"env_id": id, **kwargs}
    _check_kwargs(id, gym.spec(target), {k: v for k, v in ctor_kwargs.items() if k != "env_id"})
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}.")
    if not isinstance(no_repeat, bool):
        raise TypeError(f"no_repeat must be true or false, got {no_repeat!r}.")
    env = gym.make(target, max_episode_steps=max_turns, **ctor_kwargs)
    text = TextActionWrapper(
        env, max_turns, action_pattern, name=name or spec.name.lower(), invalid_reward=invalid_reward
    )
    return NuisanceTokenWrapper(text) if no_repeat else text
