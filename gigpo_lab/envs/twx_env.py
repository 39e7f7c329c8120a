"""TextWorldExpress (Jansen & Côté 2022, arXiv 2208.01174; PyPI ``textworld-express`` 1.1.0) as a lab env.

Registered as ``gigpo_lab/TextWorldExpress-v0``; needs ``pip install 'gigpo_lab[benchmarks]'`` and a Java runtime
>= 11. Three of its games, each with declared train/dev/test folds of 1,000 seeds:

- ``twc``: TextWorld Commonsense: pick up the misplaced objects of a house and put each where it belongs (the
  offline relative of ALFWorld's pick-and-place tasks);
- ``cookingworld``: TextWorld's cooking game: read the cookbook, gather, cut and cook the ingredients, prepare
  and eat the meal;
- ``coin``: Coin Collector: find the coin through rooms and doors, and take it.

``game_params`` are the library's generation parameters (``numLocations``, ``numItemsToPutAway``,
``numIngredients``, ``numDistractorItems``, ``includeDoors``, ``limitInventorySize``): the difficulty presets.

- **Seeds** map to the folds as :mod:`gigpo_lab.envs.folds` describes (train fold for training, ``eval_fold``, dev
  by default, for evaluation).
- **Observation** (whitespace collapsed)::

      Task: <the game's task description>
      <the last command's feedback, unless it is the room's description (look around)>
      Room: <the room's description, with its exits>
      Inventory: <the inventory>
      Admissible commands: <the valid commands, sorted>        (list_admissible=true, the default)

- **Anchor** (GiGPO's state identity): ``Room: <room description> Inventory: <inventory> Score: <raw score>``,
  the observation's room and inventory lines without the task and the feedback, plus the game's raw score. The
  room text lists every object of the room and whether each container is open; the score tells apart states
  that differ only out of sight (an object already put away in another room). Two paths to the same room,
  inventory and progress share an anchor; "look around" and "inventory" do not change it.
- **Actions.** ``action_names`` is the command vocabulary of the run's instances (:mod:`gigpo_lab.envs.folds`);
  the admissible commands are the library's valid commands that are in it (the gold path's always are). A
  command outside them is the wrapper's invalid turn: the game is not stepped.
- **Reward and success** as the library defines them: the reward is the change of the normalised score (the
  task's sub-goals; 1 in total), success is ``tasksuccess``, and ``taskfailure`` (eating an inedible
  ingredient in CookingWorld) ends the episode. The library's own step limit (``envStepLimit``, 100 by default)
  is ``step_limit``, which follows ``env.max_turns``: a step at that limit is truncated, as the wrapper's is.
- **JVM.** One JVM per process serves every env of the process (:mod:`gigpo_lab.envs.jvm`, ``heap_mb``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

from gymnasium import spaces

from gigpo_lab.algorithm.settings import param
from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.envs import jvm
from gigpo_lab.envs.base import TEXT_CHARSET, TextEnv, room_observation, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.folds import (
    EVAL_FOLDS,
    LIBRARY_STEP_LIMIT,
    cached_exploration,
    fold_instances,
    instance_for_seed,
)
from gigpo_lab.envs.schema import EnvConfig
from gigpo_lab.errors import ConfigError

#: The library's games that the lab plays (its others, mapreader, arithmetic, sorting, simonsays, peckingorder,
#: are not household text games).
GAMES = ("twc", "cookingworld", "coin")
#: The longest observation; a longer one is cut.
MAX_OBS_CHARS = 6000
#: The observation's labels and the texts the lab writes around the game's.
PHRASES = ("Task: Room: Inventory: Score: Admissible commands: , ...\n", "0 1 2 3 4 5 6 7 8 9")
_CHARSET = set(TEXT_CHARSET)


def clean(text: str) -> str:
    """Printable ASCII with whitespace collapsed."""
    return " ".join("".join(c for c in (text or "") if c in _CHARSET or c.isspace()).split())


def inventory_text(text: str) -> str:
    """The inventory without the library's own ``Inventory:`` label (the observation writes its own)."""
    text = clean(text)
    return text[len("Inventory:") :].strip() if text.startswith("Inventory:") else text


def params_string(params: dict[str, Any] | None) -> str:
    """``{"numLocations": 1, "includeDoors": 0}`` -> ``"includeDoors=0,numLocations=1"`` (the library's form)."""
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted((params or {}).items()))


class Simulator:
    """One game of the library's Java ``PythonInterface`` in this process's shared JVM: ``reset``, ``step`` and
    ``gold`` return its parsed JSON step results (``observation``, ``look``, ``inventory``, ``validActions``,
    ``score``, ``scoreRaw``, ``tasksuccess``, ``taskfailure``)."""

    def __init__(self, game: str, params: str, heap_mb: int) -> None:
        import orjson
        from textworld_express.constants import JAR_PATH

        self._loads = orjson.loads
        self.game, self.params = game, params
        self.lease = jvm.acquire(JAR_PATH, heap_mb, "TextWorldExpress")
        try:
            self.server = self.lease.track(self.lease.jvm.textworldexpress.runtime.PythonInterface())
            message = self.server.load(game, params)
        except BaseException:
            self.lease.release()
            raise
        if message:
            self.lease.release()
            raise ConfigError(f"env.game_params={params!r} for {game}: {message.strip()}")
        self.describe = f"{game} ({params})"

    def folds(self) -> dict[str, list[int]]:
        return {
            "train": list(self.server.getSeedsTrain()),
            "dev": list(self.server.getSeedsDev()),
            "test": list(self.server.getSeedsTest()),
        }

    def reset(self, seed: int, fold: str, gold: bool = False) -> dict[str, Any]:
        with jvm.crash_guard("TextWorldExpress", f"{self.describe}, {fold} seed {seed}"):
            return self._loads(self.server.generateNewGameJSON(seed, fold, gold))

    def step(self, command: str, where: str) -> dict[str, Any]:
        with jvm.crash_guard("TextWorldExpress", where):
            return self._loads(self.server.stepJSON(command))

    def gold(self) -> list[str]:
        return list(self.server.getGoldActionSequence())

    def task(self) -> str:
        return self.server.getTaskDescription()

    def close(self) -> None:
        self.lease.release()


def explore(sim: Simulator, instances: list[tuple[str, int]], walks: int, walk_length: int):
    """(valid commands, words) seen on each instance's gold path and on ``walks`` random walks from its start."""
    commands: set[str] = set()
    texts: set[str] = set()

    def seen(result: dict[str, Any]) -> None:
        commands.update(result["validActions"])
        texts.update((result["observation"], result["look"], result["inventory"]))

    for fold, seed in instances:
        where = f"{sim.describe}, {fold} seed {seed} (exploring)"
        seen(sim.reset(seed, fold, gold=True))
        texts.add(sim.task())
        for command in sim.gold():
            commands.add(command)
            seen(sim.step(command, where))
        rng = random.Random(f"{fold}/{seed}")
        for _ in range(walks):
            result = sim.reset(seed, fold)
            for _ in range(walk_length):
                result = sim.step(rng.choice(sorted(result["validActions"])), where)
                seen(result)
                if result["tasksuccess"] or result["taskfailure"]:
                    break
    return commands, set(vocabulary_of(map(clean, texts)))


class TextWorldExpressText(TextEnv):
    """TextWorldExpress's TWC, CookingWorld or Coin Collector as a text env (module doc).

    Args:
        game: ``twc``, ``cookingworld`` or ``coin``.
        game_params: the library's generation parameters (module doc); missing ones take its defaults.
        num_games: train-fold instances (seeds) the training seeds cycle through.
        num_eval_games: ``eval_fold`` instances the evaluation seeds cycle through.
        eval_fold: ``dev`` (default) or ``test`` (final reports).
        step_limit: the library's ``envStepLimit``; the option sets it to ``env.max_turns``.
        heap_mb: the JVM's heap cap in MB, shared by every env of the process (the first env's value holds).
        explore_walks, explore_length: random walks per instance, and their length, that find the commands.
        list_admissible: end the observation with the admissible commands (default true).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        game: str = "twc",
        game_params: dict[str, Any] | None = None,
        num_games: int = 64,
        num_eval_games: int = 64,
        eval_fold: str = "dev",
        step_limit: int = LIBRARY_STEP_LIMIT,
        heap_mb: int = 512,
        explore_walks: int = 8,
        explore_length: int = 30,
        list_admissible: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        if game not in GAMES:
            raise ConfigError(f"env.game={game!r} is not one of {list(GAMES)}")
        if eval_fold not in EVAL_FOLDS:
            raise ConfigError(f"env.eval_fold={eval_fold!r} is not one of {list(EVAL_FOLDS)}")
        self.sim = Simulator(game, params_string(game_params), heap_mb)
        try:
            folds = self.sim.folds()
            self.train = fold_instances("num_games", "train", folds["train"], num_games)
            self.held_out = fold_instances("num_eval_games", eval_fold, folds[eval_fold], num_eval_games)
            self.eval_fold, self.step_limit = eval_fold, int(step_limit)
            instances = [("train", s) for s in self.train] + [(eval_fold, s) for s in self.held_out]
            key = {"game": game, "params": self.sim.params, "instances": instances, "library": _version()}
            key |= {"walks": explore_walks, "length": explore_length}
            commands, words = cached_exploration(
                "textworld_express", key, lambda: explore(self.sim, instances, explore_walks, explore_length)
            )
        except BaseException:
            self.sim.close()
            raise
        self.action_names = commands
        self._known = set(commands)
        self._words = set(words)
        self.list_admissible = bool(list_admissible)
        self.action_space = spaces.Discrete(len(self.action_names))
        self.observation_space = text_space(MAX_OBS_CHARS)
        self._state: dict[str, Any] | None = None
        self.instance: tuple[str, int] | None = None  # (fold, seed) of the episode
        self._where = ""
        self._task = ""
        self.feedback = ""

    # --- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start the seed's instance (``folds.instance_for_seed``)."""
        super().reset(seed=seed)
        role, instance = instance_for_seed(seed, self.train, self.held_out, self.np_random)
        fold = "train" if role == "train" else self.eval_fold
        self.instance = (fold, instance)
        self._state = self.sim.reset(instance, fold)
        self._where = f"{self.sim.describe}, {fold} seed {instance} (reset seed {seed})"
        self._task = clean(self.sim.task())
        self.feedback, self.moves = "", 0
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Play ``action_names[action]`` if admissible; otherwise nothing happens (``info["invalid"]``)."""
        if self._state is None:
            raise RuntimeError("TextWorldExpressText.step() before reset(); call reset() first.")
        command = self.action_names[self._action_index(action)]
        if command not in self._state["validActions"]:
            return self.observation_text(), 0.0, False, False, self._info(invalid=True)
        before = float(self._state["score"])
        self._state = self.sim.step(command, self._where)
        self.moves += 1
        feedback = clean(self._state["observation"])
        self.feedback = "" if feedback == clean(self._state["look"]) else feedback
        won, lost = bool(self._state["tasksuccess"]), bool(self._state["taskfailure"])
        reward = float(self._state["score"]) - before
        truncated = self.moves >= self.step_limit and not (won or lost)
        return self.observation_text(), reward, won or lost, truncated, self._info(success=won)

    def admissible_actions(self) -> list[str]:
        """The valid commands now that are in ``action_names``, sorted."""
        return sorted(c for c in self._state["validActions"] if c in self._known)

    def close(self) -> None:
        self.sim.close()

    # --- text -------------------------------------------------------------------------------------
    def anchor(self) -> str:
        """Room, inventory and raw score (module doc, "Anchor")."""
        s = self._state
        return (
            f"Room: {clean(s['look'])} Inventory: {inventory_text(s['inventory'])} Score: {s['scoreRaw']:g}"
        )

    def observation_text(self) -> str:
        """Task, feedback, room, inventory and (``list_admissible``) the admissible commands."""
        s = self._state
        listing = (
            f"Admissible commands: {', '.join(self.admissible_actions())}" if self.list_admissible else None
        )
        return room_observation(
            f"Task: {self._task}",
            self.feedback,
            clean(s["look"]),
            inventory_text(s["inventory"]),
            listing,
            MAX_OBS_CHARS,
        )

    @cached_property
    def _vocabulary(self) -> list[str]:
        return sorted(self._words | set(vocabulary_of([*PHRASES, *self.action_names])))

    def vocabulary(self) -> list[str]:
        """The words of every text seen while exploring the instances, of the commands and of the labels."""
        return list(self._vocabulary)


def _version() -> str:
    from textworld_express import __version__

    return __version__


register_env("gigpo_lab/TextWorldExpress-v0", TextWorldExpressText, max_episode_steps=LIBRARY_STEP_LIMIT)


Game = choice_enum("Game", GAMES, __name__)
EvalFold = choice_enum("EvalFold", EVAL_FOLDS, __name__)


@dataclass
class TextWorldExpressConfig(EnvConfig):
    """``gigpo_lab/TextWorldExpress-v0`` (``gigpo_lab.envs.twx_env.TextWorldExpressText``): TextWorldExpress
    (Jansen & Côté 2022, arXiv 2208.01174; textworld-express 1.1.0; pip install 'gigpo_lab[benchmarks]'; Java
    >= 11), its train fold for training, dev (or test) for evaluation. As an option of its own (``env=textworld_express``)
    it plays TWC at the library's default parameters; the presets twx_twc, twx_cookingworld and twx_coin set their games."""

    #: Short env name used in run names and tags (stored as env.name; not an env kwarg).
    name: str = "textworld_express"
    #: The registered gymnasium id of the TextWorldExpress env.
    id: str = "gigpo_lab/TextWorldExpress-v0"
    #: Turns per episode, valid and invalid alike (the library's own default limit is 100).
    max_turns: int = param(LIBRARY_STEP_LIMIT, low=1)
    #: The game: twc (TextWorld Commonsense), cookingworld or coin (Coin Collector).
    game: Game = Game.twc
    #: The library's generation parameters, the difficulty: numLocations (1-11), includeDoors (0/1),
    #: limitInventorySize (0/1), and numItemsToPutAway (twc, 1-10), numIngredients (cookingworld, 1-5),
    #: numDistractorItems (cookingworld and coin, 0-10). Null or a missing one = the library's default.
    game_params: Optional[dict[str, Any]] = None  # noqa: UP045
    #: Train-fold seeds that training cycles through (reset seed s plays train seed number s % num_games).
    num_games: int = default_of(TextWorldExpressText, "num_games")  # type: ignore[assignment]
    #: eval_fold seeds that evaluation cycles through (evaluation episode k plays number k % num_eval_games).
    num_eval_games: int = default_of(TextWorldExpressText, "num_eval_games")  # type: ignore[assignment]
    #: The evaluation fold: dev while developing, test only for final reports.
    eval_fold: EvalFold = EvalFold.dev
    #: The library's own step limit (envStepLimit); follows env.max_turns.
    step_limit: Any = "${.max_turns}"
    #: Heap cap (-Xmx, MB) of the process's one TextWorldExpress JVM, which all its envs share.
    heap_mb: int = default_of(TextWorldExpressText, "heap_mb")  # type: ignore[assignment]
    #: Random walks per instance that find its commands (with its gold path; cached on disk).
    explore_walks: int = default_of(TextWorldExpressText, "explore_walks")  # type: ignore[assignment]
    #: Length of each of those walks.
    explore_length: int = default_of(TextWorldExpressText, "explore_length")  # type: ignore[assignment]
    #: End the observation with the admissible commands.
    list_admissible: bool = default_of(TextWorldExpressText, "list_admissible")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/textworld_express": TextWorldExpressConfig}
