"""A text adapter for any gymnasium env with a ``Discrete`` action space.

Registered as ``gigpo_lab/GymDiscrete-v0``; :func:`gigpo_lab.envs.make_env` also routes every
gymnasium id outside the ``gigpo_lab`` namespace here, so the config group ``env=gym_discrete``
needs only ``env.id=CliffWalking-v1 env.action_names=[up,right,down,left]``.

- The observation is ``renderer(obs)`` followed by the action names; the anchor is ``renderer(obs)``.
  The default renderer is ``str``. A renderer is any importable function obs -> str given as
  ``"package.module:function"`` or ``"package.module.function"``; its text must be printable ASCII.
- ``success_on`` decides ``info["success"]``: ``"terminated_positive"`` (default: the episode
  terminated on a step with reward > 0, e.g. FrozenLake), ``"terminated"`` (any termination, e.g.
  CliffWalking, whose goal step pays -1), or ``"never"``.
- :meth:`GymDiscreteText.vocabulary` is best effort: the action names and instruction, plus the
  rendering of every observation when the observation space is ``Discrete`` (at most 10,000 values),
  otherwise of the observations met in a few seeded resets and short random walks. A renderer may
  list every word it can write in its attribute ``vocabulary`` (``minigrid_view.vocabulary``); those join too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.envs.base import TEXT_CHARSET, TextEnv, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.schema import EnvConfig
from gigpo_lab.envs.text_actions import normalize_action

SUCCESS_MODES = ("terminated_positive", "terminated", "never")
_CHARSET = frozenset(TEXT_CHARSET)


def resolve_renderer(path: str | None) -> Callable[[Any], str]:
    """Import ``"module:function"`` or ``"module.function"``; ``None`` gives ``str``."""
    if path is None:
        return str
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"renderer must be a dotted path 'package.module:function', got {path!r}.")
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    hint = (
        "Give renderer as 'package.module:function' (or 'package.module.function') naming an importable "
        "function obs -> str, or leave it null for str(obs)."
    )
    if not module_name or not attr:
        raise ValueError(f"renderer {path!r} is not a dotted path. {hint}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"renderer {path!r}: module {module_name!r} does not import ({err}). {hint}"
        ) from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"renderer {path!r}: {module_name!r} has no function {attr!r}. {hint}")
    return fn


class GymDiscreteText(TextEnv):
    """Wraps ``gymnasium.make(env_id, **kwargs)`` into a text env with named actions.

    Args:
        env_id: the gymnasium id of the inner env (its action space must be ``Discrete``).
        kwargs: keyword arguments for the inner ``gymnasium.make`` (default none).
        action_names: one name per action (default ``["0", "1", ...]``); lower-case words work best.
        renderer: dotted path of a function obs -> str (default ``str``).
        success_on: ``terminated_positive`` (default), ``terminated`` or ``never`` (see the module docstring).
        max_obs_chars: the longest allowed rendering; a longer one is an error (default 4096).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        action_names: list[str] | None = None,
        renderer: str | None = None,
        success_on: str = "terminated_positive",
        max_obs_chars: int = 4096,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        if success_on not in SUCCESS_MODES:
            raise ValueError(f"success_on must be one of {list(SUCCESS_MODES)}, got {success_on!r}.")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ValueError(f"kwargs must be a mapping of {env_id}'s constructor arguments, got {kwargs!r}.")
        self.render_fn = resolve_renderer(renderer)
        self.env_id, self.inner_kwargs = env_id, dict(kwargs or {})
        self.inner = self._make_inner()
        if not isinstance(self.inner.action_space, spaces.Discrete):
            raise ValueError(
                f"{env_id} has action space {self.inner.action_space}; GymDiscrete adapts only Discrete action spaces."
            )
        n = int(self.inner.action_space.n)
        names = [str(a) for a in action_names] if action_names is not None else [str(i) for i in range(n)]
        if len(names) != n or len({normalize_action(a) for a in names}) != n:
            raise ValueError(
                f"action_names must be {n} distinct names for {env_id}'s {n} actions, got {names}."
            )
        self.action_names = tuple(names)
        self.success_on = success_on
        self.action_space = spaces.Discrete(n)
        self.max_obs_chars = int(max_obs_chars)
        self.observation_space = text_space(self.max_obs_chars + len(self._actions_line()) + 1)
        self._obs_text = ""

    def _make_inner(self) -> gym.Env:
        try:
            return gym.make(self.env_id, **self.inner_kwargs)
        except TypeError as err:
            raise ValueError(f"kwargs {self.inner_kwargs} were rejected by {self.env_id}: {err}") from err

    def _render(self, obs: Any) -> str:
        text = self.render_fn(obs)
        if not isinstance(text, str) or not text or len(text) > self.max_obs_chars or set(text) - _CHARSET:
            raise ValueError(
                f"The renderer must return non-empty printable ASCII of at most max_obs_chars={self.max_obs_chars} "
                f"characters; got {text!r:.200}. Fix the renderer or raise max_obs_chars."
            )
        return text

    def _actions_line(self) -> str:
        return "Actions: " + ", ".join(self.action_names)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Reset the inner env with a seed drawn from this env's seeded generator."""
        super().reset(seed=seed)
        obs, _ = self.inner.reset(seed=int(self.np_random.integers(2**31 - 1)), options=options)
        self._obs_text = self._render(obs)
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Step the inner env with ``start + action``."""
        if not self._obs_text:
            raise RuntimeError("GymDiscreteText.step() before reset(); call reset() first.")
        index = self._action_index(action)
        obs, reward, terminated, truncated, _ = self.inner.step(self.inner.action_space.start + index)
        self._obs_text = self._render(obs)
        success = {
            "terminated_positive": bool(terminated) and float(reward) > 0,
            "terminated": bool(terminated),
            "never": False,
        }[self.success_on]
        return self.observation_text(), float(reward), bool(terminated), bool(truncated), self._info(success)

    def anchor(self) -> str:
        """The rendered inner observation."""
        return self._obs_text

    def observation_text(self) -> str:
        """The rendered inner observation and the action names."""
        return f"{self._obs_text}\n{self._actions_line()}"

    def vocabulary(self, seeds: int = 8, walk: int = 20) -> list[str]:
        """Best effort (see the module docstring); exact for ``Discrete`` observation spaces."""
        texts = [self._actions_line(), "\n", *getattr(self.render_fn, "vocabulary", ())]
        space = self.inner.observation_space
        if isinstance(space, spaces.Discrete) and space.n <= 10_000:
            texts += [self._render(space.start + i) for i in range(int(space.n))]
        else:
            probe = self._make_inner()
            rng = np.random.default_rng(0)
            for seed in range(seeds):
                obs, _ = probe.reset(seed=seed)
                texts.append(self._render(obs))
                for _ in range(walk):
                    obs, _, term, trunc, _ = probe.step(
                        probe.action_space.start + int(rng.integers(len(self.action_names)))
                    )
                    texts.append(self._render(obs))
                    if term or trunc:
                        break
            probe.close()
        return vocabulary_of(texts)

    def close(self) -> None:
        self.inner.close()


register_env("gigpo_lab/GymDiscrete-v0", GymDiscreteText, max_episode_steps=200)


SuccessOn = choice_enum("SuccessOn", SUCCESS_MODES, __name__)


@dataclass
class GymDiscreteConfig(EnvConfig):
    """Any gymnasium env with a Discrete action space, as text (adapter ``gigpo_lab/GymDiscrete-v0``)."""

    #: Keyword arguments for gymnasium.make(id, ...) of the adapted env.
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: One name per action, in the env's action order; null gives ["0", "1", ...].
    action_names: Optional[list[str]] = None  # noqa: UP045
    #: Dotted path 'package.module:function' (or 'package.module.function') of a function obs -> printable
    #: ASCII text, used for the observation and the anchor; null = str(obs).
    renderer: Optional[str] = None  # noqa: UP045
    #: When info["success"] is true: terminated_positive (terminated on a step with reward > 0),
    #: terminated (any termination), or never.
    success_on: SuccessOn = SuccessOn.terminated_positive
    #: The longest allowed rendering in characters; a longer one is an error.
    max_obs_chars: int = default_of(GymDiscreteText, "max_obs_chars")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/gym_discrete": GymDiscreteConfig}
