"""The no-repeat control (``env.no_repeat=true``): a nuisance token drawn every step, so states never repeat.

:class:`NuisanceTokenWrapper` goes around the :class:`~gigpo_lab.envs.text_actions.TextActionWrapper` of any
env and appends one line to the observation and to ``info["anchor"]`` after every reset and every step,
valid or invalid::

    S F F F                     S F F F
    F H F H         ->          F H F H
    F F F H                     F F F H
    H F F G                     H F F G
                                noise 004829104712

The number is drawn uniformly from 10^12 values, from a generator seeded by the reset seed and the wrapper's
own instance number, so the G envs of one group (reset with the same seed) draw apart, and a run made again
in a fresh process draws the same numbers. Two rows of one group share an anchor only if their 12-digit
numbers collide: about 1e-8 for a group of 160 rows. So GiGPO's step groups are singletons, its step level is
0 (``step_singleton: zero``) and GiGPO equals GRPO (docs/ALGORITHMS.md, "Controls").

The token carries no information, but it is in what the policy reads: the tiny policy's word tokenizer maps
``noise`` and the number to ``<unk>`` (two constant tokens), an LLM reads the digits; and since the
observation changes every turn, the tiny policy's ``unchanged`` mark (``model.mark_unchanged``) never fires
and a count bonus (``exploration=count``) finds every state new.
"""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: The digits of the nuisance number: 10^DIGITS values.
DIGITS = 12
#: The line appended to the observation and the anchor, before the number.
PREFIX = "\nnoise "

_INSTANCES = itertools.count()  # each wrapper's number, in the order they are built


class NuisanceTokenWrapper(gym.Wrapper):
    """Append ``noise <number>`` to every observation and anchor, a fresh number each reset and step.

    Args:
        env: a text env whose reset and step infos carry ``anchor`` (a ``make_env`` env).
        instance: this wrapper's number, mixed into its seed; None (the default) = the next in this process.
    """

    def __init__(self, env: gym.Env, instance: int | None = None) -> None:
        super().__init__(env)
        self.instance = next(_INSTANCES) if instance is None else int(instance)
        self._rng = np.random.default_rng([self.instance])
        inner = env.observation_space
        if isinstance(inner, spaces.Text):
            self.observation_space = spaces.Text(
                max_length=inner.max_length + len(PREFIX) + DIGITS,
                min_length=inner.min_length,
                charset="".join(sorted(inner.character_set)),
            )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Reset the env; with a seed, reseed the draw from (seed, this wrapper's instance number)."""
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._rng = np.random.default_rng([int(seed), self.instance])
        return self._tag(obs, info)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Step the env and tag the observation and anchor it returns."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._tag(obs, info)
        return obs, reward, terminated, truncated, info

    def _tag(self, obs: str, info: dict) -> tuple[str, dict]:
        if "anchor" not in info:
            raise ValueError(
                f"env.no_repeat=true tags info['anchor'], and {self.env.unwrapped} reports none; use a gigpo_lab "
                "text env (make_env) or set env.no_repeat=false"
            )
        token = f"{PREFIX}{int(self._rng.integers(10**DIGITS)):0{DIGITS}d}"
        return obs + token, {**info, "anchor": info["anchor"] + token}
