"""ScienceWorld (Wang et al. 2022, arXiv 2203.07540; PyPI ``scienceworld`` 1.2.3) as a lab env.

Registered as ``gigpo_lab/ScienceWorld-v0``; needs ``pip install 'gigpo_lab[benchmarks]'`` and a Java runtime >= 11.
One of its 30 task types (``task``: ``boil``, ``find-living-thing``, ``grow-plant``, ``test-conductivity``, ...;
the library's ``get_task_names()``), with the task's variations split into declared train/dev/test folds.
``simplifications`` are the library's: ``easy`` (all of them) or a comma-separated subset of
``teleportAction``, ``openDoors``, ``openContainers``, ``selfWateringFlowerPots``, ``noElectricalAction``; empty
is the full task.

- **Seeds** map to the task's variations as :mod:`gigpo_lab.envs.folds` describes (train fold for training,
  ``eval_fold``, dev by default, for evaluation).
- **Observation** (whitespace collapsed)::

      Task: <the task description>
      <the last command's feedback, unless it is the room's description>
      Room: <look around: the room, its objects and their states, its doors>
      Inventory: <the inventory>
      Command templates: activate OBJ, close OBJ, ..., wait1              (list_templates=true, the default)

  The valid commands are not listed: there are 100 to 1,500 in a state (every object pair for ``move OBJ to
  OBJ``), and the library takes 0.2-0.8 s to compute them. The prompt gives the templates instead, as
  ScienceWorld's LLM agents do; the objects are in the room's text.
- **Anchor**: ``Room: <look around> Inventory: <inventory> Score: <score>``: the observation without the task,
  the feedback and the templates, plus the score (progress that the room does not show).
- **Actions.** ``action_names`` is the command vocabulary of the run's variations: the valid commands at their
  start, in every room each gold path enters (with each inventory it brings), at its every ``explore_every``-th state and at its end, the gold commands, and the
  answers ``0``-``9`` to the simulator's "Ambiguous request" question (:mod:`gigpo_lab.envs.folds`). Every one is
  admissible; a valid command outside the vocabulary
  (an object the explored gold paths never picked up) is the wrapper's unparsed turn. The simulator judges the
  rest: a command it cannot parse ("No known action matches that input.") is an
  invalid turn (``info["invalid"]``), the state unchanged, as ScienceWorld's own agents see it.
- **Reward and success** as the library defines them: the score runs from 0 to 100 (the task's sub-goals), the
  reward is its change, success is a completed task (score 100); a failed task (a wrong object focused on) sets
  the score to -100 and ends the episode. The library's own step limit (``envStepLimit``, 100 by default) is
  ``step_limit``, which follows ``env.max_turns``: a step at it is truncated.
- **JVM.** One JVM per process serves every env of the process (:mod:`gigpo_lab.envs.jvm`, ``heap_mb``); a
  variation is loaded (0.3-1 s) only when the seed's variation differs from the one the env holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gymnasium import spaces

from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.envs import jvm
from gigpo_lab.envs.base import TextEnv, room_observation, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.folds import (
    EVAL_FOLDS,
    LIBRARY_STEP_LIMIT,
    cached_exploration,
    fold_instances,
    instance_for_seed,
)
from gigpo_lab.envs.schema import EnvConfig
from gigpo_lab.envs.twx_env import clean
from gigpo_lab.errors import ConfigError

#: The simulator's reply to a command it cannot parse: the turn is invalid.
UNKNOWN = "No known action matches that input."
#: Answers to the simulator's "Ambiguous request: Please enter the number ..." question.
ANSWERS = tuple(str(i) for i in range(10))
#: The longest observation; a longer one is cut.
MAX_OBS_CHARS = 6000
#: The observation's labels and the simulator's replies the lab knows of.
PHRASES = (
    "Task: Room: Inventory: Score: Command templates: , ... -\n",
    UNKNOWN,
    "Ambiguous request: Please enter the number for the action you intended (or blank to cancel):",
    "It's not clear how to get there from here. The door is already open. You teleport to the",
)


class Simulator:
    """One game of ScienceWorld's Java ``PythonInterface`` in this process's shared JVM."""

    def __init__(self, task: str, simplifications: str, heap_mb: int) -> None:
        from scienceworld.constants import JAR_PATH

        self.lease = jvm.acquire(JAR_PATH, heap_mb, "ScienceWorld")
        try:
            self.server = self.lease.track(self.lease.jvm.scienceworld.runtime.pythonapi.PythonInterface())
            names = list(self.server.getTaskNames())
        except BaseException:
            self.lease.release()
            raise
        if task not in names:
            self.lease.release()
            raise ConfigError(f"env.task={task!r} is not a ScienceWorld task; valid: {names}")
        self.task, self.simplifications = task, simplifications
        self.loaded: int | None = None

    def folds(self) -> dict[str, list[int]]:
        self.load(0)
        return {
            "train": list(self.server.getVariationsTrain()),
            "dev": list(self.server.getVariationsDev()),
            "test": list(self.server.getVariationsTest()),
        }

    def load(self, variation: int, gold: bool = False) -> None:
        """Load ``variation`` (when another one, or a gold path, is asked for) and reset it."""
        where = f"{self.task} variation {variation} ({self.simplifications or 'no simplifications'})"
        with jvm.crash_guard("ScienceWorld", where):
            if self.loaded != variation or gold:
                self.server.load(self.task, variation, self.simplifications, gold)
                self.loaded = variation
            self.server.reset()

    def step(self, command: str, where: str) -> dict[str, Any]:
        """The reply to ``command`` and the state after it: ``feedback``, ``look``, ``inventory``, ``score``
        (0-100, -100 on failure), ``completed``."""
        with jvm.crash_guard("ScienceWorld", where):
            feedback = self.server.step(command)
            return {
                "feedback": feedback,
                "look": self.server.freeActionLook(),
                "inventory": self.server.freeActionInventory(),
                "score": int(round(100 * self.server.getScore())),
                "completed": bool(self.server.getCompleted()),
            }

    def close(self) -> None:
        self.lease.release()


def explore(sim: Simulator, variations: list[int], every: int) -> tuple[set[str], set[str]]:
    """(commands, words) of the variations' gold paths (module doc, "Actions"). A gold path is one of several
    (find-living-thing's picks one of the animals at random), so the valid commands are read in every (room, inventory) it
    reaches: they name every object there and in the inventory."""
    commands: set[str] = set(ANSWERS)
    texts: set[str] = set(sim.server.getPossibleActions())
    for variation in variations:
        sim.load(variation, gold=True)
        gold = list(sim.server.getGoldActionSequence())
        texts.add(sim.server.getTaskDescription())
        where = f"{sim.task} variation {variation} (exploring)"
        rooms: set[tuple[str, str]] = set()
        for k, command in enumerate(["look around", *gold]):
            state = sim.step(command, where)
            texts.update((state["feedback"], state["look"], state["inventory"]))
            commands.add(command)
            room = (state["look"].split(".")[0], state["inventory"])
            if room not in rooms or k % every == 0 or k == len(gold) or state["completed"]:
                commands.update(sim.server.getValidActionObjectCombinations())
                rooms.add(room)
            if state["completed"]:
                break
    commands = {c for c in commands if c and c == " ".join(c.split())}
    return commands, set(vocabulary_of([*map(clean, texts), *commands]))


class ScienceWorldText(TextEnv):
    """A ScienceWorld task as a text env (module doc).

    Args:
        task: the task type (``get_task_names()``).
        simplifications: ``easy``, a comma-separated subset of the library's simplifications, or empty.
        num_games: train-fold variations the training seeds cycle through.
        num_eval_games: ``eval_fold`` variations the evaluation seeds cycle through.
        eval_fold: ``dev`` (default) or ``test`` (final reports).
        step_limit: the library's ``envStepLimit``; the option sets it to ``env.max_turns``.
        heap_mb: the JVM's heap cap in MB, shared by every env of the process (the first env's value holds).
        explore_every: the valid commands are read at every this-many-th state of each gold path.
        list_templates: end the observation with the command templates (default true).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        task: str = "find-living-thing",
        simplifications: str = "easy",
        num_games: int = 16,
        num_eval_games: int = 16,
        eval_fold: str = "dev",
        step_limit: int = LIBRARY_STEP_LIMIT,
        heap_mb: int = 1024,
        explore_every: int = 5,
        list_templates: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        if eval_fold not in EVAL_FOLDS:
            raise ConfigError(f"env.eval_fold={eval_fold!r} is not one of {list(EVAL_FOLDS)}")
        self.sim = Simulator(task, simplifications or "", heap_mb)
        try:
            folds = self.sim.folds()
            self.train = fold_instances("num_games", "train", folds["train"], num_games)
            self.held_out = fold_instances("num_eval_games", eval_fold, folds[eval_fold], num_eval_games)
            self.templates = sorted(self.sim.server.getPossibleActions())
            key = {
                "task": task,
                "simplifications": self.sim.simplifications,
                "variations": self.train + self.held_out,
                "every": explore_every,
                "library": _version(),
            }
            commands, words = cached_exploration(
                "scienceworld", key, lambda: explore(self.sim, self.train + self.held_out, explore_every)
            )
        except BaseException:
            self.sim.close()
            raise
        self.eval_fold, self.step_limit = eval_fold, int(step_limit)
        self.action_names = commands
        self._words = set(words)
        self.list_templates = bool(list_templates)
        self.action_space = spaces.Discrete(len(self.action_names))
        self.observation_space = text_space(MAX_OBS_CHARS)
        self._state: dict[str, Any] | None = None
        self.instance: tuple[str, int] | None = None  # (fold, variation) of the episode
        self._where, self._task, self.feedback, self.moves = "", "", "", 0

    # --- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Load (if needed) and reset the seed's variation, then look around, as the library's reset does."""
        super().reset(seed=seed)
        role, variation = instance_for_seed(seed, self.train, self.held_out, self.np_random)
        fold = "train" if role == "train" else self.eval_fold
        self._where = f"{self.sim.task} {fold} variation {variation} (reset seed {seed})"
        self.instance = (fold, variation)
        self.sim.load(variation)
        self._state = self.sim.step("look around", self._where)
        self._task = clean(self.sim.server.getTaskDescription())
        self.feedback, self.moves = "", 0
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Send ``action_names[action]`` to the simulator; a command it cannot parse is an invalid turn."""
        if self._state is None:
            raise RuntimeError("ScienceWorldText.step() before reset(); call reset() first.")
        command = self.action_names[self._action_index(action)]
        before = self._state["score"]
        state = self.sim.step(command, self._where)
        if clean(state["feedback"]) == UNKNOWN:
            self.feedback = UNKNOWN
            return self.observation_text(), 0.0, False, False, self._info(invalid=True)
        self._state, self.moves = state, self.moves + 1
        feedback = clean(state["feedback"])
        self.feedback = "" if feedback == clean(state["look"]) else feedback
        won = state["completed"] and state["score"] >= 100
        lost = state["score"] < 0
        terminated = won or lost or state["completed"]
        truncated = self.moves >= self.step_limit and not terminated
        reward = float(state["score"] - before)
        return self.observation_text(), reward, terminated, truncated, self._info(success=won)

    def close(self) -> None:
        self.sim.close()

    # --- text -------------------------------------------------------------------------------------
    def anchor(self) -> str:
        """Room, inventory and score (module doc, "Anchor")."""
        s = self._state
        return f"Room: {clean(s['look'])} Inventory: {_inventory(s['inventory'])} Score: {s['score']}"

    def observation_text(self) -> str:
        """Task, feedback, room, inventory and (``list_templates``) the command templates."""
        s = self._state
        listing = f"Command templates: {', '.join(self.templates)}" if self.list_templates else None
        return room_observation(
            f"Task: {self._task}",
            self.feedback,
            clean(s["look"]),
            _inventory(s["inventory"]),
            listing,
            MAX_OBS_CHARS,
        )

    @cached_property
    def _vocabulary(self) -> list[str]:
        return sorted(self._words | set(vocabulary_of([*PHRASES, *self.templates, *self.action_names])))

    def vocabulary(self) -> list[str]:
        """The words of the texts seen on the gold paths, of the commands, templates and labels."""
        return list(self._vocabulary)


def _inventory(text: str) -> str:
    """The inventory without the simulator's ``In your inventory, you see:`` opening."""
    text = clean(text)
    opening = "In your inventory, you see:"
    return text[len(opening) :].strip() if text.startswith(opening) else text


def _version() -> str:
    from scienceworld.version import __version__

    return __version__


register_env("gigpo_lab/ScienceWorld-v0", ScienceWorldText, max_episode_steps=LIBRARY_STEP_LIMIT)

EvalFold = choice_enum("EvalFold", EVAL_FOLDS, __name__)


@dataclass
class ScienceWorldConfig(EnvConfig):
    """``gigpo_lab/ScienceWorld-v0`` (``gigpo_lab.envs.scienceworld_env.ScienceWorldText``): ScienceWorld (Wang et
    al. 2022, arXiv 2203.07540; scienceworld 1.2.3; pip install 'gigpo_lab[benchmarks]'; Java >= 11), one task
    type, its train variations for training, dev (or test) for evaluation."""

    #: The task type, one of the library's 30 (boil, find-living-thing, grow-plant, test-conductivity, ...).
    task: str = default_of(ScienceWorldText, "task")  # type: ignore[assignment]
    #: The library's simplifications: easy (all), a comma-separated subset of teleportAction, openDoors,
    #: openContainers, selfWateringFlowerPots, noElectricalAction, or "" (the full task).
    simplifications: str = default_of(ScienceWorldText, "simplifications")  # type: ignore[assignment]
    #: Train-fold variations that training cycles through (reset seed s plays number s % num_games).
    num_games: int = default_of(ScienceWorldText, "num_games")  # type: ignore[assignment]
    #: eval_fold variations that evaluation cycles through (episode k plays number k % num_eval_games).
    num_eval_games: int = default_of(ScienceWorldText, "num_eval_games")  # type: ignore[assignment]
    #: The evaluation fold: dev while developing, test only for final reports.
    eval_fold: EvalFold = EvalFold.dev
    #: The library's own step limit (envStepLimit); follows env.max_turns.
    step_limit: Any = "${.max_turns}"
    #: Heap cap (-Xmx, MB) of the process's one ScienceWorld JVM, which all its envs share.
    heap_mb: int = default_of(ScienceWorldText, "heap_mb")  # type: ignore[assignment]
    #: The valid commands are read at every this-many-th state of each gold path (cached on disk).
    explore_every: int = default_of(ScienceWorldText, "explore_every")  # type: ignore[assignment]
    #: End the observation with the command templates.
    list_templates: bool = default_of(ScienceWorldText, "list_templates")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/scienceworld": ScienceWorldConfig}
