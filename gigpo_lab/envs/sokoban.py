"""Sokoban as text, with the reward of RAGEN and verl-agent.

Registered as ``gigpo_lab/Sokoban-v0``. Every reset draws a new solvable puzzle from the reset seed
(see :mod:`gigpo_lab.envs.sokoban_gen`). Symbols, one character per cell, separated by spaces::

    # wall    _ floor    O target    X box    * box on target    P player    S player on target

The anchor is the grid alone, for example::

    # # # # # #
    # _ _ # # #
    # _ X _ O #
    # _ P _ _ #
    # # # # # #
    # # # # # #

Rewards (gym-sokoban's, which RAGEN and verl-agent keep): ``step_reward`` (-0.1) on every step,
``box_on_target_reward`` (+1) for pushing a box onto a target, ``box_off_target_reward`` (-1) for
pushing one off, and ``solve_reward`` (+10) when every box is on a target, which ends the episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from gigpo_lab.choices import default_of
from gigpo_lab.envs.base import TextEnv, render_grid, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.schema import EnvConfig
from gigpo_lab.envs.sokoban_gen import MOVES, Puzzle, generate_puzzle

#: Action names, in the order of :data:`gigpo_lab.envs.sokoban_gen.MOVES`.
ACTIONS = ("up", "down", "left", "right")

INSTRUCTION = (
    "You are playing Sokoban. Push every box onto a target. You can push a box but not pull it. "
    "Symbols: # wall, _ floor, O target, X box, * box on target, P you, S you on a target."
)


class SokobanText(TextEnv):
    """A Sokoban room with text observations; the puzzle depends only on the reset seed.

    Args:
        height, width: room size including the border walls (default 6x6, the RAGEN setting).
        num_boxes: boxes (and targets) per puzzle (default 1).
        reverse_steps: length of the generator's backwards walk (default 100).
        step_reward: reward of every step (default -0.1).
        box_on_target_reward: reward for pushing a box onto a target (default 1.0).
        box_off_target_reward: reward for pushing a box off a target (default -1.0).
        solve_reward: extra reward when all boxes are on targets (default 10.0).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        height: int = 6,
        width: int = 6,
        num_boxes: int = 1,
        reverse_steps: int = 100,
        step_reward: float = -0.1,
        box_on_target_reward: float = 1.0,
        box_off_target_reward: float = -1.0,
        solve_reward: float = 10.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        for key, value in (("height", height), ("width", width), ("num_boxes", num_boxes)):
            if not isinstance(value, int):
                raise ValueError(f"{key} must be an int, got {value!r}.")
        # Fail at construction, not at the first reset, on sizes the generator refuses.
        generate_puzzle(np.random.default_rng(0), height, width, num_boxes, reverse_steps)
        self.height, self.width, self.num_boxes = height, width, num_boxes
        self.reverse_steps = reverse_steps
        self.step_reward = float(step_reward)
        self.box_on_target_reward = float(box_on_target_reward)
        self.box_off_target_reward = float(box_off_target_reward)
        self.solve_reward = float(solve_reward)
        self.action_names = ACTIONS
        self.action_space = spaces.Discrete(len(ACTIONS))
        self.observation_space = text_space(
            len(INSTRUCTION) + len(self._actions_line()) + 2 * height * width + 8
        )
        self.puzzle: Puzzle | None = None
        self.boxes: set[tuple[int, int]] = set()
        self.player: tuple[int, int] = (0, 0)

    def _actions_line(self) -> str:
        return "Actions: " + ", ".join(ACTIONS)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Draw a puzzle from this env's seeded generator."""
        super().reset(seed=seed)
        self.puzzle = generate_puzzle(
            self.np_random, self.height, self.width, self.num_boxes, self.reverse_steps
        )
        self.boxes = set(self.puzzle.boxes)
        self.player = self.puzzle.player
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Move (and push at most one box); walking into a wall or a blocked box leaves the state as is."""
        if self.puzzle is None:
            raise RuntimeError("SokobanText.step() before reset(); call reset() first.")
        dr, dc = MOVES[self._action_index(action)]
        walls, targets = self.puzzle.walls, self.puzzle.targets
        reward = self.step_reward
        nxt = (self.player[0] + dr, self.player[1] + dc)
        if not walls[nxt]:
            if nxt not in self.boxes:
                self.player = nxt
            else:
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if not walls[beyond] and beyond not in self.boxes:
                    self.boxes.remove(nxt)
                    self.boxes.add(beyond)
                    self.player = nxt
                    if beyond in targets and nxt not in targets:
                        reward += self.box_on_target_reward
                    elif nxt in targets and beyond not in targets:
                        reward += self.box_off_target_reward
        solved = self.boxes <= targets
        if solved:
            reward += self.solve_reward
        return self.observation_text(), float(reward), solved, False, self._info(success=solved)

    def anchor(self) -> str:
        """The grid, one symbol per cell (see the module docstring)."""
        p = self.puzzle
        rows = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                pos = (r, c)
                if p.walls[r, c]:
                    row.append("#")
                elif pos == self.player:
                    row.append("S" if pos in p.targets else "P")
                elif pos in self.boxes:
                    row.append("*" if pos in p.targets else "X")
                else:
                    row.append("O" if pos in p.targets else "_")
            rows.append(row)
        return render_grid(rows)

    def observation_text(self) -> str:
        """Instruction, grid, and the action names."""
        return f"{INSTRUCTION}\n{self.anchor()}\n{self._actions_line()}"

    def vocabulary(self) -> list[str]:
        """Instruction words, the seven cell symbols, the action names, and the newline."""
        return vocabulary_of([INSTRUCTION, self._actions_line(), "# _ O X * P S\n#"])


register_env(
    "gigpo_lab/Sokoban-v0", SokobanText, max_episode_steps=100
)  # default max_episode_steps (RAGEN's max_steps)


@dataclass
class SokobanConfig(EnvConfig):
    """``gigpo_lab/Sokoban-v0`` (``gigpo_lab.envs.sokoban.SokobanText``); defaults follow RAGEN / verl-agent."""

    #: Room height including the border walls, int >= 4.
    height: int = default_of(SokobanText, "height")  # type: ignore[assignment]
    #: Room width including the border walls, int >= 4.
    width: int = default_of(SokobanText, "width")  # type: ignore[assignment]
    #: Boxes (and targets) per puzzle, int >= 1; the room must have room for them.
    num_boxes: int = default_of(SokobanText, "num_boxes")  # type: ignore[assignment]
    #: Length of the generator's backwards random walk, int >= 1; longer walks give harder puzzles.
    reverse_steps: int = default_of(SokobanText, "reverse_steps")  # type: ignore[assignment]
    #: Reward of every step.
    step_reward: float = default_of(SokobanText, "step_reward")  # type: ignore[assignment]
    #: Reward for pushing a box onto a target.
    box_on_target_reward: float = default_of(SokobanText, "box_on_target_reward")  # type: ignore[assignment]
    #: Reward for pushing a box off a target.
    box_off_target_reward: float = default_of(SokobanText, "box_off_target_reward")  # type: ignore[assignment]
    #: Extra reward when every box is on a target (ends the episode).
    solve_reward: float = default_of(SokobanText, "solve_reward")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/sokoban": SokobanConfig}
