"""Typed schemas of the ``env`` config group: one base with the keys ``make_env`` itself takes, one
dataclass per env class with that env's keyword arguments (and their defaults).

``conf/env/<option>.yaml`` extends one of them (``defaults: [/schema/env/<schema>@_here_, _self_]``) and
sets only what differs: ``name``, ``id``, ``max_turns`` and the env's own values. A misspelt key or a value
of the wrong type or outside a choice fails when the config is composed. Registered by
``gigpo_lab.config_paths.register_schemas`` under ``schema/env/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from gigpo_lab.choices import choice_enum
from gigpo_lab.envs.gym_discrete import SUCCESS_MODES
from gigpo_lab.envs.household_world import TASKS
from gigpo_lab.envs.text_actions import DEFAULT_ACTION_PATTERN

SuccessOn = choice_enum("SuccessOn", SUCCESS_MODES, __name__)
TaskType = choice_enum("TaskType", TASKS, __name__)


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
    #: Turns per episode, valid and invalid alike; the turn that reaches it is truncated. Any int >= 1.
    max_turns: int = MISSING
    #: Regex with one capture group that extracts the action from the model's text (IGNORECASE, DOTALL;
    #: the last match wins). A bare response equal to an admissible action is accepted too.
    action_pattern: str = DEFAULT_ACTION_PATTERN
    #: Reward of an invalid turn (the state does not change). In an env that charges every step (CliffWalking:
    #: -1) set it to the step cost, or invalid turns become the cheapest way to spend the episode.
    invalid_reward: float = 0.0


@dataclass
class FrozenLakeConfig(EnvConfig):
    """``gigpo_lab/FrozenLake-v0`` (``gigpo_lab.envs.frozenlake.FrozenLakeText``)."""

    #: Side of the square map: 4 or 8 for gymnasium's standard maps; any int >= 2 when random_map is true.
    size: int = 4
    #: false: the fixed standard map (every seed starts the same); true: a new random solvable map per reset
    #: seed (gymnasium's generate_random_map).
    random_map: bool = False
    #: Probability that a tile of a random map is frozen (p of generate_random_map), in (0, 1].
    frozen_prob: float = 0.8
    #: A fixed map as a list of row strings over S F H G (e.g. [SFFF, FHFH, FFFH, HFFG]); overrides size and
    #: random_map. null = the standard map of the given size.
    desc: Optional[list[str]] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: gymnasium's slippery dynamics (the move goes sideways with probability 2/3); false = deterministic.
    is_slippery: bool = False
    #: Reward for reaching the goal G (gymnasium's 1.0; the GiGPO paper's LLM runs use 10).
    success_reward: float = 1.0
    #: Reward for falling into a hole H (the episode ends).
    hole_reward: float = 0.0
    #: Reward for every other step.
    step_reward: float = 0.0


@dataclass
class SokobanConfig(EnvConfig):
    """``gigpo_lab/Sokoban-v0`` (``gigpo_lab.envs.sokoban.SokobanText``); defaults follow RAGEN / verl-agent."""

    #: Room height including the border walls, int >= 4.
    height: int = 6
    #: Room width including the border walls, int >= 4.
    width: int = 6
    #: Boxes (and targets) per puzzle, int >= 1; the room must have room for them.
    num_boxes: int = 1
    #: Length of the generator's backwards random walk, int >= 1; longer walks give harder puzzles.
    reverse_steps: int = 100
    #: Reward of every step.
    step_reward: float = -0.1
    #: Reward for pushing a box onto a target.
    box_on_target_reward: float = 1.0
    #: Reward for pushing a box off a target.
    box_off_target_reward: float = -1.0
    #: Extra reward when every box is on a target (ends the episode).
    solve_reward: float = 10.0


@dataclass
class HouseholdConfig(EnvConfig):
    """``gigpo_lab/Household-v0`` (``gigpo_lab.envs.household.HouseholdText``)."""

    #: Receptacles per world, int in [2, 7] (of cabinet, countertop, drawer, fridge, microwave, shelf, sink);
    #: the goal's target and tool are always present.
    num_receptacles: int = 5
    #: Objects besides the goal object, int in [0, 6] (of apple, bowl, bread, egg, mug, plate, potato).
    num_distractors: int = 2
    #: Tasks to draw from, a non-empty subset of the allowed values.
    task_types: list[TaskType] = field(default_factory=lambda: list(TaskType))
    #: Reward on the step that completes the goal (other steps give 0); 10 as in the GiGPO paper.
    success_reward: float = 10.0


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
    max_obs_chars: int = 4096


#: ``"env/<schema>"`` -> schema (stored as ``schema/env/<schema>``); env options name one of them.
SCHEMAS: dict[str, type] = {
    "env/base": EnvConfig,
    "env/frozenlake": FrozenLakeConfig,
    "env/sokoban": SokobanConfig,
    "env/household": HouseholdConfig,
    "env/gym_discrete": GymDiscreteConfig,
}
