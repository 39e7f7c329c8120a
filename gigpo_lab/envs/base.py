"""What every gigpo_lab text environment shares: the info contract, the text space and the token rule.

A base env (FrozenLake, Sokoban, Household, the GymDiscrete adapter) is a ``gymnasium.Env`` whose
observation is text and whose action space is ``Discrete(len(action_names))``. The
:class:`~gigpo_lab.envs.text_actions.TextActionWrapper` turns model text into those indices.

Every ``info`` dict (from ``reset`` and ``step``) carries the keys of :data:`INFO_KEYS`:

``anchor``
    The raw current state as a compact string, without history or instruction. Equal states give
    equal anchors. GiGPO groups step rows by it, and the tiny policy reads it as its prompt.
``admissible_actions``
    The action strings that are admissible now (a fresh list on every call).
``success``
    True only on the step that reaches the goal.
``invalid``
    True when the step did not change the state because the action was not admissible.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: The word-level split of the tiny policy's tokenizer; :meth:`TextEnv.vocabulary` uses the same rule.
TOKEN_PATTERN = re.compile(r"<action>|</action>|\n|[A-Za-z]+|\d+|\S")

#: The characters a text observation may use: printable ASCII without tabs and carriage returns.
TEXT_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"

#: The keys every reset and step info carries.
INFO_KEYS = ("anchor", "admissible_actions", "success", "invalid")


def tokenize(text: str) -> list[str]:
    """Split ``text`` the way the tiny policy's word-level tokenizer does (``TOKEN_PATTERN``)."""
    return TOKEN_PATTERN.findall(text)


def vocabulary_of(texts: Iterable[str]) -> list[str]:
    """The sorted set of tokens of ``texts``."""
    tokens: set[str] = set()
    for text in texts:
        tokens.update(tokenize(text))
    return sorted(tokens)


def text_space(max_length: int) -> spaces.Text:
    """A ``Text`` space over :data:`TEXT_CHARSET` with room for ``max_length`` characters."""
    return spaces.Text(max_length=max_length, min_length=1, charset=TEXT_CHARSET)


def room_observation(
    header: str, feedback: str, room: str, inventory: str, listing: str | None, max_chars: int
) -> str:
    """The text games' observation (TextWorld, TextWorldExpress, ScienceWorld): the header line (goal or task),
    the last feedback when there is one, ``Room:``, ``Inventory:`` and an optional labelled line (``listing``,
    e.g. ``Admissible commands: …``), one per line; cut to ``max_chars`` with ``...``."""
    lines = [header, *([feedback] if feedback else []), f"Room: {room}", f"Inventory: {inventory}"]
    if listing is not None:
        lines.append(listing)
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def render_grid(rows: Iterable[Iterable[str]]) -> str:
    """Cells as single characters separated by spaces, rows separated by newlines (``S F F F``)."""
    return "\n".join(" ".join(row) for row in rows)


class TextEnv(gym.Env[str, np.int64]):
    """Base class of the text environments: Discrete actions named by ``action_names``, text observations.

    Subclasses set ``action_names``, ``action_space`` and ``observation_space`` in ``__init__`` and
    implement :meth:`anchor`, :meth:`observation_text`, :meth:`vocabulary`, and, when some actions
    are not always admissible, :meth:`admissible_actions`.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}
    action_names: tuple[str, ...] = ()

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; use one of {self.metadata['render_modes']} or None."
            )
        self.render_mode = render_mode

    # --- the contract -------------------------------------------------------------------------------
    def anchor(self) -> str:
        """The raw current state as a compact, hashable string (no history, no instruction)."""
        raise NotImplementedError

    def observation_text(self) -> str:
        """The text observation for a language policy: instruction, rendered state, admissible actions."""
        raise NotImplementedError

    def vocabulary(self) -> list[str]:
        """Every token (``TOKEN_PATTERN``) that can appear in observations, anchors or action names."""
        raise NotImplementedError

    def admissible_actions(self) -> list[str]:
        """The currently admissible action strings (by default: every action)."""
        return list(self.action_names)

    # --- helpers for subclasses ---------------------------------------------------------------------
    def _action_index(self, action: Any) -> int:
        """Check a Discrete action and return it as an int (a clear error for anything else)."""
        if not self.action_space.contains(action):
            raise ValueError(
                f"{type(self).__name__}: action {action!r} is not in {self.action_space}; "
                f"pass an index into action_names={list(self.action_names)}."
            )
        return int(action)

    def _info(self, success: bool = False, invalid: bool = False) -> dict[str, Any]:
        """A fresh info dict with the :data:`INFO_KEYS`."""
        return {
            "anchor": self.anchor(),
            "admissible_actions": self.admissible_actions(),
            "success": bool(success),
            "invalid": bool(invalid),
        }

    def render(self) -> str | None:
        """``ansi``: the text observation; ``None`` without a render mode."""
        if self.render_mode == "ansi":
            return self.observation_text()
        return None
