"""FrozenLake as text: gymnasium's ``FrozenLake-v1`` dynamics, rendered as a space-separated grid.

Registered as ``gigpo_lab/FrozenLake-v0``. The agent walks from ``S`` to ``G`` over frozen tiles
``F`` and must not fall into a hole ``H``; ``P`` marks the agent. The anchor is the grid with the
agent marked, for example (4x4, agent one step right of the start)::

    S P F F
    F H F H
    F F F H
    H F F G

The map is gymnasium's standard map of the chosen size (``random_map=False``), a map given as
``desc``, or a random solvable map per reset seed (``random_map=True``, from
``gymnasium.envs.toy_text.frozen_lake.generate_random_map``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from gymnasium import spaces
from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv, generate_random_map

from gigpo_lab.choices import default_of
from gigpo_lab.envs.base import TextEnv, render_grid, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.schema import EnvConfig

#: gymnasium's FrozenLake action order: 0 left, 1 down, 2 right, 3 up.
ACTIONS = ("left", "down", "right", "up")

INSTRUCTION = (
    "You are on a frozen lake. Walk from S to the goal G over frozen tiles F without falling into "
    "a hole H. P marks your position."
)


class FrozenLakeText(TextEnv):
    """gymnasium's FrozenLake with text observations, anchors and named actions.

    Args:
        size: side of the square map, 4 or 8 for the standard maps; any size >= 2 with ``random_map``.
        random_map: draw a new solvable map on every reset from the reset seed (default False).
        frozen_prob: probability that a random-map tile is frozen (``p`` of ``generate_random_map``).
        desc: a fixed map as a list of row strings over ``SFHG`` (overrides ``size`` and ``random_map``).
        is_slippery: gymnasium's slippery dynamics (default False: moves are deterministic).
        success_reward: reward for reaching ``G`` (gymnasium's default 1).
        hole_reward: reward for falling into a hole (default 0).
        step_reward: reward for any other step (default 0).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        size: int = 4,
        random_map: bool = False,
        frozen_prob: float = 0.8,
        desc: list[str] | None = None,
        is_slippery: bool = False,
        success_reward: float = 1.0,
        hole_reward: float = 0.0,
        step_reward: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        if desc is not None:
            desc = [str(row) for row in desc]
            if not desc or any(len(row) != len(desc[0]) for row in desc) or set("".join(desc)) - set("SFHG"):
                raise ValueError(f"desc must be equal-length rows over the letters S, F, H, G; got {desc!r}.")
            size = len(desc)
            random_map = False
        elif not random_map and f"{size}x{size}" not in MAPS:
            raise ValueError(
                f"size={size!r} has no standard FrozenLake map; use size 4 or 8, or random_map=true, or give desc."
            )
        if not isinstance(size, int) or size < 2:
            raise ValueError(f"size must be an int >= 2, got {size!r}.")
        if not 0.0 < frozen_prob <= 1.0:
            raise ValueError(f"frozen_prob must be in (0, 1], got {frozen_prob!r}.")
        self.size = size
        self.random_map = bool(random_map)
        self.frozen_prob = float(frozen_prob)
        self.is_slippery = bool(is_slippery)
        self.reward_schedule = (float(success_reward), float(hole_reward), float(step_reward))
        self.fixed_desc = desc if desc is not None else (None if random_map else MAPS[f"{size}x{size}"])
        self.action_names = ACTIONS
        self.action_space = spaces.Discrete(len(ACTIONS))
        ncols = len(self.fixed_desc[0]) if self.fixed_desc else size
        self.observation_space = text_space(
            len(INSTRUCTION) + len(self._actions_line()) + 2 * size * ncols + 8
        )
        self._lake: FrozenLakeEnv | None = None
        self._anchors: dict[int, str] = {}  # state -> anchor text of the current map

    def _actions_line(self) -> str:
        return "Actions: " + ", ".join(ACTIONS)

    def _build_lake(self, desc: list[str]) -> FrozenLakeEnv:
        self._anchors = {}  # a new map: its anchors are rendered afresh
        return FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery, reward_schedule=self.reward_schedule)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Reset to ``S``; with ``random_map`` the map is drawn from this env's seeded generator."""
        super().reset(seed=seed)
        if self.random_map:
            map_seed = int(self.np_random.integers(2**31 - 1))
            self._lake = self._build_lake(generate_random_map(self.size, self.frozen_prob, seed=map_seed))
        elif self._lake is None:
            self._lake = self._build_lake(self.fixed_desc)
        # The slip noise lives in the inner env; seed it from ours so that equal seeds replay equally.
        self._lake.reset(seed=int(self.np_random.integers(2**31 - 1)))
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Move left/down/right/up (index into ``ACTIONS``); the episode ends in ``G`` or a hole."""
        if self._lake is None:
            raise RuntimeError("FrozenLakeText.step() before reset(); call reset() first.")
        state, reward, terminated, _, _ = self._lake.step(self._action_index(action))
        success = bool(terminated and self._cell(state) == "G")
        return self.observation_text(), float(reward), bool(terminated), False, self._info(success=success)

    def _cell(self, state: int) -> str:
        row, col = divmod(int(state), self._lake.ncol)
        return self._lake.desc[row, col].decode()

    def anchor(self) -> str:
        """The grid with ``P`` on the agent's cell (rendered once per cell of the current map, then cached)."""
        lake = self._lake
        state = int(lake.s)
        text = self._anchors.get(state)
        if text is None:
            rows = [[c.decode() for c in row] for row in lake.desc]
            row, col = divmod(state, lake.ncol)
            rows[row][col] = "P"
            text = self._anchors[state] = render_grid(rows)
        return text

    def observation_text(self) -> str:
        """Instruction, grid, and the action names."""
        return f"{INSTRUCTION}\n{self.anchor()}\n{self._actions_line()}"

    def vocabulary(self) -> list[str]:
        """Instruction words, the cell letters ``S F H G P``, the action names, and the newline."""
        return vocabulary_of([INSTRUCTION, self._actions_line(), "S F H G P\nS"])


register_env(
    "gigpo_lab/FrozenLake-v0", FrozenLakeText, max_episode_steps=100
)  # default max_episode_steps (gymnasium's FrozenLake 4x4)


@dataclass
class FrozenLakeConfig(EnvConfig):
    """``gigpo_lab/FrozenLake-v0`` (``gigpo_lab.envs.frozenlake.FrozenLakeText``)."""

    #: Side of the square map: 4 or 8 for gymnasium's standard maps; any int >= 2 when random_map is true.
    size: int = default_of(FrozenLakeText, "size")  # type: ignore[assignment]
    #: false: the fixed standard map (every seed starts the same); true: a new random solvable map per reset
    #: seed (gymnasium's generate_random_map).
    random_map: bool = default_of(FrozenLakeText, "random_map")  # type: ignore[assignment]
    #: Probability that a tile of a random map is frozen (p of generate_random_map), in (0, 1].
    frozen_prob: float = default_of(FrozenLakeText, "frozen_prob")  # type: ignore[assignment]
    #: A fixed map as a list of row strings over S F H G (e.g. [SFFF, FHFH, FFFH, HFFG]); overrides size and
    #: random_map. null = the standard map of the given size.
    desc: Optional[list[str]] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: gymnasium's slippery dynamics (the move goes sideways with probability 2/3); false = deterministic.
    is_slippery: bool = default_of(FrozenLakeText, "is_slippery")  # type: ignore[assignment]
    #: Reward for reaching the goal G (gymnasium's 1.0; the GiGPO paper's LLM runs use 10).
    success_reward: float = default_of(FrozenLakeText, "success_reward")  # type: ignore[assignment]
    #: Reward for falling into a hole H (the episode ends).
    hole_reward: float = default_of(FrozenLakeText, "hole_reward")  # type: ignore[assignment]
    #: Reward for every other step.
    step_reward: float = default_of(FrozenLakeText, "step_reward")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/frozenlake": FrozenLakeConfig}
