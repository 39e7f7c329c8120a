"""Household: a small ALFWorld-like text task, generated from the reset seed.

Registered as ``gigpo_lab/Household-v0``. The world, commands and rules are in
:mod:`gigpo_lab.envs.household_world`; this module renders them. An observation reads::

    Your task is to: put a clean mug in the cabinet.
    You arrive at the sink. In the sink, you see nothing.
    Admissible actions: look, inventory, go to cabinet, go to countertop, clean mug with sink

The anchor is the state in three short lines, without the feedback of the last command::

    goal: put clean mug in cabinet
    at: sink | open: cabinet
    apple: fridge | mug: hand clean | plate: shelf

(goal; location and open receptacles; every object with its place and flags, sorted by name). The goal
is part of the anchor because it is fixed for the episode and the tiny policy reads the anchor as
its whole prompt; it is equal across a group (one seed), so it does not split anchor groups.

Reward: ``success_reward`` (10, the GiGPO paper's setting) on the step that completes the goal,
which ends the episode; 0 otherwise. An inadmissible command index changes nothing, gives
reward 0 and ``info["invalid"] = True`` (the feedback reads "Nothing happens.").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymnasium import spaces

from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.envs.base import TextEnv, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.household_world import (
    HAND,
    OBJECTS,
    RECEPTACLES,
    START,
    TASKS,
    World,
    all_commands,
    generate_world,
)
from gigpo_lab.envs.schema import EnvConfig

#: Every fixed phrase of the feedback and the task line (the vocabulary is built from these).
PHRASES = (
    "Your task is to: put a an the in on.",
    "You are in the middle of a room. Looking around, you see a and nothing.",
    "You arrive at the. You are at the. The is closed. In On the, you see a an and nothing.",
    "You open the. You close the. You pick up the from the. You put the in on the.",
    "You clean heat cool the using the. You are carrying: a an. You are not carrying anything.",
    "Nothing happens. Admissible actions: ,",
    "goal: put clean hot cool in on\nat: room | open: none\nhand clean hot cool",
)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _join(nouns: list[str]) -> str:
    """'a mug', 'a mug and an apple', 'a mug, a plate and an apple'."""
    items = [_a(n) for n in nouns]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class HouseholdText(TextEnv):
    """A household task with text commands; the world depends only on the reset seed.

    Args:
        num_receptacles: receptacles per world (2 to 7, default 5); the goal's target and tool are always in.
        num_distractors: objects besides the goal object (0 to 6, default 2).
        task_types: tasks to draw from, any of ``place, clean, heat, cool`` (default all four).
        success_reward: reward when the goal is reached (default 10.0).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        num_receptacles: int = 5,
        num_distractors: int = 2,
        task_types: tuple[str, ...] | list[str] = tuple(TASKS),
        success_reward: float = 10.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        task_types = tuple(task_types)
        unknown = [t for t in task_types if t not in TASKS]
        if not task_types or unknown:
            raise ValueError(
                f"task_types must be a non-empty subset of {list(TASKS)}; got {list(task_types)}."
            )
        if not isinstance(num_receptacles, int) or not 2 <= num_receptacles <= len(RECEPTACLES):
            raise ValueError(
                f"num_receptacles must be an int in [2, {len(RECEPTACLES)}], got {num_receptacles!r}."
            )
        if not isinstance(num_distractors, int) or not 0 <= num_distractors < len(OBJECTS):
            raise ValueError(
                f"num_distractors must be an int in [0, {len(OBJECTS) - 1}], got {num_distractors!r}."
            )
        self.num_receptacles = num_receptacles
        self.num_distractors = num_distractors
        self.task_types = task_types
        self.success_reward = float(success_reward)
        self.commands = all_commands()
        self.action_names = tuple(c.name for c in self.commands)
        self.action_space = spaces.Discrete(len(self.commands))
        bound = len(", ".join(self.action_names)) + sum(len(p) for p in PHRASES) + 12 * len(OBJECTS) + 200
        self.observation_space = text_space(bound)
        self.world: World | None = None
        self.feedback = ""

    # --- gymnasium API ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Draw a world from this env's seeded generator; the agent starts in the middle of the room."""
        super().reset(seed=seed)
        self.world = generate_world(
            self.np_random, self.num_receptacles, self.num_distractors, self.task_types
        )
        self.feedback = self._look()
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Execute the command ``action_names[action]`` if admissible; otherwise nothing happens."""
        if self.world is None:
            raise RuntimeError("HouseholdText.step() before reset(); call reset() first.")
        cmd = self.commands[self._action_index(action)]
        if not self.world.admissible(cmd):
            self.feedback = "Nothing happens."
            return self.observation_text(), 0.0, False, False, self._info(invalid=True)
        self.world.apply(cmd)
        self.feedback = self._describe(cmd)
        success = self.world.success()
        reward = self.success_reward if success else 0.0
        return self.observation_text(), reward, success, False, self._info(success=success)

    def admissible_actions(self) -> list[str]:
        """The admissible commands now, in the fixed order of the command universe."""
        return [c.name for c in self.commands if self.world.admissible(c)]

    # --- text -------------------------------------------------------------------------------------
    def goal_text(self) -> str:
        """'put a clean mug in the cabinet'."""
        w = self.world
        flag = w.goal_flag()
        noun = f"{flag} {w.goal_obj}" if flag else w.goal_obj
        return f"put {_a(noun)} {RECEPTACLES[w.goal_rec][0]} the {w.goal_rec}"

    def anchor(self) -> str:
        """Goal; location and open receptacles; every object's place and flags (see the module docstring)."""
        w = self.world
        flag = w.goal_flag()
        goal = f"goal: put {flag + ' ' if flag else ''}{w.goal_obj} {RECEPTACLES[w.goal_rec][0]} {w.goal_rec}"
        place = f"at: {w.location} | open: {' '.join(sorted(w.opened)) or 'none'}"
        objects = " | ".join(f"{o}: {' '.join([w.where[o], *sorted(w.flags[o])])}" for o in sorted(w.where))
        return f"{goal}\n{place}\n{objects}"

    def observation_text(self) -> str:
        """Task line, feedback of the last command, admissible commands."""
        return (
            f"Your task is to: {self.goal_text()}.\n{self.feedback}\n"
            f"Admissible actions: {', '.join(self.admissible_actions())}"
        )

    def vocabulary(self) -> list[str]:
        """The fixed phrases, receptacle and object names, and every command of the universe."""
        return vocabulary_of([*PHRASES, *RECEPTACLES, *OBJECTS, START, HAND, *self.action_names])

    def _view(self, rec: str) -> str:
        w = self.world
        if not w.is_open(rec):
            return f"The {rec} is closed."
        inside = w.contents(rec)
        return (
            f"{RECEPTACLES[rec][0].capitalize()} the {rec}, you see {_join(inside) if inside else 'nothing'}."
        )

    def _look(self) -> str:
        w = self.world
        if w.location == START:
            return f"You are in the middle of a room. Looking around, you see {_join(list(w.receptacles))}."
        return f"You are at the {w.location}. {self._view(w.location)}"

    def _describe(self, cmd) -> str:
        """The feedback line of an executed command."""
        w = self.world
        if cmd.verb == "look":
            return self._look()
        if cmd.verb == "inventory":
            held = w.holding()
            return f"You are carrying: {_a(held)}." if held else "You are not carrying anything."
        if cmd.verb == "go":
            return f"You arrive at the {cmd.rec}. {self._view(cmd.rec)}"
        if cmd.verb == "open":
            return f"You open the {cmd.rec}. {self._view(cmd.rec)}"
        if cmd.verb == "close":
            return f"You close the {cmd.rec}."
        if cmd.verb == "take":
            return f"You pick up the {cmd.obj} from the {cmd.rec}."
        if cmd.verb == "put":
            return f"You put the {cmd.obj} {RECEPTACLES[cmd.rec][0]} the {cmd.rec}."
        return f"You {cmd.verb} the {cmd.obj} using the {cmd.rec}."


register_env("gigpo_lab/Household-v0", HouseholdText, max_episode_steps=30)


TaskType = choice_enum("TaskType", TASKS, __name__)


@dataclass
class HouseholdConfig(EnvConfig):
    """``gigpo_lab/Household-v0`` (``gigpo_lab.envs.household.HouseholdText``)."""

    #: Receptacles per world, int in [2, 7] (of cabinet, countertop, drawer, fridge, microwave, shelf, sink);
    #: the goal's target and tool are always present.
    num_receptacles: int = default_of(HouseholdText, "num_receptacles")  # type: ignore[assignment]
    #: Objects besides the goal object, int in [0, 6] (of apple, bowl, bread, egg, mug, plate, potato).
    num_distractors: int = default_of(HouseholdText, "num_distractors")  # type: ignore[assignment]
    #: Tasks to draw from, a non-empty subset of the allowed values.
    task_types: list[TaskType] = field(default_factory=lambda: list(TaskType))
    #: Reward on the step that completes the goal (other steps give 0); 10 as in the GiGPO paper.
    success_reward: float = default_of(HouseholdText, "success_reward")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/household": HouseholdConfig}
