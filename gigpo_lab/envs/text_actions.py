"""Model text -> env action, with validity and a turn limit that counts every step.

:class:`TextActionWrapper` takes the model's whole response as the action:

- ``"<action>go to fridge</action>"``: the text captured by ``action_pattern`` (the **last** match
  when there are several, since a model states its final answer last), or
- ``"go to fridge"``: the whole stripped response, when it is an admissible action.

Matching ignores case and collapses runs of whitespace, so ``<action>LEFT</action>``, ``"  left "``
and ``"Left"`` all mean ``left``. Anything else is **invalid**: the env is not stepped, the state does
not change, the reward is ``invalid_reward`` (default 0) and ``info["invalid"]`` is True (``info["invalid_reason"]`` says
``"unparsed"`` or ``"inadmissible"``). The invalid-action penalty is the estimator's job, not the env's.

Every step, valid or not, counts once toward ``max_turns``; the step that reaches it is truncated.
Each info carries ``anchor``, ``admissible_actions``, ``success``, ``invalid``, ``invalid_reason``
and ``action`` (the executed action name, ``""`` when invalid).
"""

from __future__ import annotations

import re
import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

#: The default action format: ``<action>...</action>``, as in verl-agent's prompts.
DEFAULT_ACTION_PATTERN = r"<action>(.*?)</action>"


def normalize_action(text: str) -> str:
    """Lower-case, strip, and collapse whitespace: ``"  Go  to\\nFridge "`` -> ``"go to fridge"``."""
    return " ".join(text.split()).lower()


class TextActionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Parse model text into the wrapped env's Discrete action and count turns.

    Args:
        env: a gigpo_lab text env (its ``unwrapped`` has ``action_names`` and reports
            ``info["admissible_actions"]``).
        max_turns: the episode is truncated on turn ``max_turns`` (>= 1), valid or invalid turns alike.
        action_pattern: a regex with exactly one capture group for the action (searched with
            IGNORECASE and DOTALL); default ``<action>(.*?)</action>``.
        name: a short env name for run names (default: the env id's name, lower-cased).
        invalid_reward: the env reward of an invalid turn, which leaves the state unchanged (default 0.0). In
            an env that charges every step (CliffWalking's -1), 0 would make invalid turns the cheapest way to
            spend the episode; setting it to the step cost makes an invalid turn a wasted step.
    """

    def __init__(
        self,
        env: gym.Env,
        max_turns: int,
        action_pattern: str = DEFAULT_ACTION_PATTERN,
        name: str | None = None,
        invalid_reward: float = 0.0,
    ) -> None:
        # Recording the arguments lets ``env.spec.make()`` rebuild the wrapped env (check_env does).
        gym.utils.RecordConstructorArgs.__init__(
            self, max_turns=max_turns, action_pattern=action_pattern, name=name, invalid_reward=invalid_reward
        )
        gym.Wrapper.__init__(self, env)
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}.")
        try:
            self.pattern = re.compile(action_pattern, re.IGNORECASE | re.DOTALL)
        except (re.error, TypeError) as err:
            raise ValueError(f"action_pattern {action_pattern!r} is not a valid regex: {err}") from err
        if self.pattern.groups != 1:
            raise ValueError(
                f"action_pattern {action_pattern!r} must have exactly one capture group around the action, "
                f"like the default {DEFAULT_ACTION_PATTERN!r}."
            )
        names = getattr(env.unwrapped, "action_names", None)
        if not names:
            raise TypeError(f"{env.unwrapped} has no action_names; wrap a gigpo_lab text env.")
        self.action_index = {normalize_action(a): i for i, a in enumerate(names)}
        self.max_turns = max_turns
        self.invalid_reward = float(invalid_reward)
        self.action_pattern = action_pattern
        self.name = name if name is not None else self._default_name()
        self.action_space = spaces.Text(max_length=4096, min_length=0, charset=string.printable)
        self.turn = 0
        self._last_obs: str | None = None
        self._last_info: dict[str, Any] = {}

    def _default_name(self) -> str:
        spec = self.env.spec
        return spec.name.lower() if spec is not None else type(self.env.unwrapped).__name__.lower()

    def parse(self, text: str, admissible: list[str]) -> tuple[str | None, str]:
        """The admissible action named by ``text`` and ``""``, or None and why the text is invalid.

        The reason is ``"unparsed"`` when the text names no action of the env at all and
        ``"inadmissible"`` when it names one that is not admissible in the current state.
        """
        matches = self.pattern.findall(text)
        candidate = normalize_action(matches[-1] if matches else text)
        by_name = {normalize_action(a): a for a in admissible}
        if candidate in by_name:
            return by_name[candidate], ""
        return None, "inadmissible" if candidate in self.action_index else "unparsed"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Reset the env and the turn counter."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.turn = 0
        return obs, self._remember(obs, info, invalid=False, reason="", action="")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """One turn: step the env with the parsed action, or flag the turn invalid and leave the state."""
        if self._last_obs is None:
            raise RuntimeError("TextActionWrapper.step() before reset(); call reset() first.")
        if not isinstance(action, str):
            raise TypeError(f"TextActionWrapper expects the model's text (str), got {type(action).__name__}.")
        self.turn += 1
        at_limit = self.turn >= self.max_turns
        chosen, reason = self.parse(action, self._last_info["admissible_actions"])
        if chosen is None:
            info = self._remember(self._last_obs, self._last_info, invalid=True, reason=reason, action="")
            info["success"] = False
            return self._last_obs, self.invalid_reward, False, at_limit, info
        obs, reward, terminated, truncated, info = self.env.step(self.action_index[normalize_action(chosen)])
        info = self._remember(obs, info, invalid=bool(info.get("invalid", False)), reason="", action=chosen)
        return obs, float(reward), bool(terminated), bool(truncated) or at_limit, info

    def _remember(self, obs: str, info: dict, invalid: bool, reason: str, action: str) -> dict[str, Any]:
        """Keep the latest observation and info (for invalid turns) and return a fresh copy of the info."""
        self._last_obs = obs
        self._last_info = {**info, "admissible_actions": list(info["admissible_actions"])}
        return {
            **self._last_info,
            "admissible_actions": list(self._last_info["admissible_actions"]),
            "invalid": invalid,
            "invalid_reason": reason,
            "action": action,
        }
