"""TextWorld: Microsoft's text-game engine (the one under ALFWorld), offline, as a gigpo_lab text env.

Registered as ``gigpo_lab/TextWorld-v0``; needs ``pip install 'gigpo_lab[textworld]'``. The games are files:
generated from seeds into a cache (:mod:`gigpo_lab.envs.textworld_games`: coin collector, treasure hunter,
the cooking game, each with its difficulty settings), or the user's own (``games``/``eval_games``). A game
is played through ``textworld.start(path, request_infos=textworld.EnvInfos(...))``, whose ``reset()`` and
``step(command)`` return a ``textworld.core.GameState`` (``feedback``, ``description``, ``inventory``,
``objective``, ``admissible_commands``, ``score``, ``won``, ``lost``, ``facts``).

- **Games and seeds.** ``reset(seed)`` picks the game from the seed alone: a training seed (below
  :data:`EVAL_SEED_BASE`, the trainer's first evaluation seed) plays training game ``seed % num_games``, an
  evaluation seed plays evaluation game ``(seed - EVAL_SEED_BASE) % num_eval_games``. The envs of a group share
  the seed, so they play the same game; training and evaluation games are disjoint sets.
- **Observation** (whitespace collapsed, printable ASCII)::

      Goal: <the game's objective>
      <feedback of the last command, unless it is the room's description (go, look) or the game's banner>
      Room: <the room's description>
      Inventory: <the inventory>
      Admissible commands: go south, inventory, look        (list_admissible=true, the default)

  The admissible list is on by default, as in verl-agent's ALFWorld prompt and the lab's Household: a
  command must match one of them exactly, and neither the tiny policy nor a small LLM can guess TextWorld's
  command grammar (``take coin from table``) without seeing it. ``list_admissible=false`` drops the line.
- **Anchor.** A canonical hash of the game *state*, not of its text: the facts (``EnvInfos(facts=True)``, the
  set of ``textworld.logic.Proposition``), each written ``name(arg:type, ...)`` with the entities' names, sorted,
  joined and hashed (SHA-256, 12 hex digits, written as single characters so that every token is in the
  vocabulary): ``"3 f a 9 c 0 e 1 2 b 4 d"``. Two command paths that reach the same facts share an anchor;
  the feedback text does not enter it. The tiny policy reads the anchor by default (``model.prompt_source``);
  on TextWorld give it ``model.prompt_source=observation``: a hash does not carry over to unseen games.
- **Actions.** ``action_names`` is every command the games' templates (``game.command_templates``) can form
  with their entities (by type, ``game.kb.types``), over all training and evaluation games. A command outside
  the current admissible list is invalid: the wrapper (:mod:`gigpo_lab.envs.text_actions`) does not step the
  game, gives ``invalid_reward`` and sets ``info["invalid"]``, like every lab env.
- **Reward and success.** The reward of a step is the increase of the game's score; success is ``won``; the
  episode terminates when the game is won or lost.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from gymnasium import spaces

from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.envs.base import TEXT_CHARSET, TextEnv, room_observation, text_space, vocabulary_of
from gigpo_lab.envs.factory import register_env
from gigpo_lab.envs.schema import EnvConfig
from gigpo_lab.envs.text_actions import normalize_action
from gigpo_lab.envs.textworld_games import generated_games, resolve_user_games
from gigpo_lab.envs.textworld_generation import CHALLENGES
from gigpo_lab.envs.textworld_import import require_textworld
from gigpo_lab.errors import ConfigError

#: The trainer's first evaluation seed (``gigpo_lab.training.seeds.EVAL_SEED_BASE``; a test checks they agree).
EVAL_SEED_BASE = 1_000_000_000
#: Hex digits of the anchor's hash (48 bits: a collision inside one game's few hundred states is negligible).
ANCHOR_DIGITS = 12
#: The longest observation; a longer one is cut (a cooking game's admissible list is the long part).
MAX_OBS_CHARS = 6000
#: The labels of the observation and what the games print outside their own source.
PHRASES = (
    "Goal: Room: Inventory: Admissible commands: , ...",
    "You are carrying nothing. You are carrying: You can't see any such thing.",
    "0 1 2 3 4 5 6 7 8 9 a b c d e f",
)
_END = "*** The End ***"
_CHARSET = set(TEXT_CHARSET)


def _clean(text: str) -> str:
    """Collapse whitespace; cut the prompt '>' and the status line after it, and the end-of-game screen."""
    text = (text or "").split("\n>")[0].split(_END)[0]
    text = "".join(c for c in text if c in _CHARSET or c.isspace())
    return " ".join(text.split()).strip(" >").strip()


def state_anchor(facts) -> str:
    """The anchor of a state: its propositions written ``name(entity:type, ...)``, sorted, hashed (module doc)."""
    lines = sorted(f"{p.name}({', '.join(f'{v.name}:{v.type}' for v in p.arguments)})" for p in facts)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:ANCHOR_DIGITS]
    return " ".join(digest)


@lru_cache(maxsize=4096)
def _game_words(json_path: str, mtime: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every command the game's templates form with its entities, the vocabulary of its Inform 7 source)."""
    from textworld.generator.game import Game
    from textworld.generator.inform7 import generate_inform7_source

    game = Game.load(json_path)
    by_type: dict[str, set[str]] = {}
    for info in game.infos.values():
        if info.name:
            by_type.setdefault(info.type, set()).add(info.name)
    every = sorted(set().union(*by_type.values())) if by_type else []

    def names(placeholder: str) -> list[str]:
        try:
            kinds = [t.name for t in game.kb.types.get(placeholder).subtypes]
        except (KeyError, AttributeError, ValueError):
            return every
        return sorted(set().union(*(by_type.get(k, set()) for k in kinds)))

    commands: set[str] = set(game.metadata.get("walkthrough") or [])
    for template in game.command_templates:
        slots = re.findall(r"\{(\w+)\}", template)
        for combo in itertools.product(*(names(s) for s in slots)):
            text = template
            for slot, name in zip(slots, combo, strict=True):
                text = text.replace("{" + slot + "}", name, 1)
            commands.add(text)
    ni = Path(json_path).with_suffix(".ni")
    source = ni.read_text() if ni.is_file() else generate_inform7_source(game)
    words = vocabulary_of([source, game.objective or "", *commands])
    return tuple(sorted(normalize_action(c) for c in commands)), tuple(words)


def game_words(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`_game_words` of the game ``path`` (through its ``.json``), memoised per file version."""
    json_path = str(Path(path).with_suffix(".json"))
    return _game_words(json_path, os.path.getmtime(json_path))


def challenge_settings(challenge: str, settings: dict[str, Any] | None) -> dict[str, Any]:
    """``settings`` completed with the challenge's ``tw-make`` defaults; an unknown or missing knob is an error."""
    textworld = require_textworld()
    if challenge not in CHALLENGES:
        raise ConfigError(f"env.challenge={challenge!r} is not one of {sorted(CHALLENGES)}")
    parser = argparse.ArgumentParser(add_help=False)
    textworld.challenges.CHALLENGES[CHALLENGES[challenge]][2](parser)  # (desc, make, add_arguments)
    # private (argparse): no public call lists a parser's arguments, and tw-make's challenges declare their
    # knobs only as arguments (in argument groups); tests/test_private_apis.py checks _actions still lists them
    knobs = {a.dest: a for a in parser._actions if a.dest != "help"}
    given = dict(settings or {})
    unknown = sorted(set(given) - set(knobs))
    if unknown:
        raise ConfigError(f"env.settings: {unknown} are not settings of {challenge}; valid: {sorted(knobs)}")
    missing = sorted(k for k, a in knobs.items() if a.required and k not in given)
    if missing:
        raise ConfigError(
            f"env.settings.{missing[0]} is required by {challenge}; add env.settings.{missing[0]}=<int>"
        )
    return {k: given.get(k, a.default) for k, a in sorted(knobs.items())}


class TextWorldText(TextEnv):
    """TextWorld games as a text env; the game of an episode depends only on its reset seed (module doc).

    Args:
        challenge: ``coin_collector``, ``treasure_hunter`` or ``cooking``: the generator of the games (unused
            when ``games`` is given).
        settings: the challenge's difficulty knobs, as ``tw-make``'s flags (``level`` for coin collector and
            treasure hunter; ``recipe``, ``take``, ``go``, ``open``, ``cook``, ``cut``, ``drop`` for cooking).
        num_games: training games generated from ``game_seed``.
        num_eval_games: evaluation games (the same for every ``game_seed``, none among the training games).
        game_seed: the seed the training games derive from (the presets pass the run's ``seed``).
        games: the user's training games instead: a glob or a list of ``.z8``/``.ulx`` files (with their
            ``.json``); null = generate.
        eval_games: the user's evaluation games (a glob or a list); null with ``games`` = the training games.
        cache_dir: the root of the generated games' cache (null = ``$GIGPO_LAB_CACHE/textworld`` or
            ``~/.cache/gigpo_lab/textworld``).
        list_admissible: end the observation with the admissible commands (default true).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        challenge: str = "coin_collector",
        settings: dict[str, Any] | None = None,
        num_games: int = 16,
        num_eval_games: int = 8,
        game_seed: int = 0,
        games: str | list[str] | None = None,
        eval_games: str | list[str] | None = None,
        cache_dir: str | None = None,
        list_admissible: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode)
        self.textworld = require_textworld()
        for key, value, low in (("num_games", num_games, 1), ("num_eval_games", num_eval_games, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"env.{key}={value!r} must be an int >= {low}")
        if games is not None:
            self.train_files = resolve_user_games("games", games)
            if eval_games is None:
                warnings.warn(
                    "env.eval_games is not set: evaluation plays the training games",
                    UserWarning,
                    stacklevel=2,
                )
                self.eval_files = list(self.train_files)
            else:
                self.eval_files = resolve_user_games("eval_games", eval_games)
                shared = sorted(
                    set(map(os.path.realpath, self.train_files)) & set(map(os.path.realpath, self.eval_files))
                )
                if shared:
                    raise ConfigError(
                        f"env.games and env.eval_games share {shared[0]!r}; keep the two sets disjoint"
                    )
        elif eval_games is not None:
            raise ConfigError("env.eval_games is set but env.games is not; give env.games=<glob or list> too")
        else:
            full = challenge_settings(challenge, settings)
            self.train_files, self.eval_files = generated_games(
                challenge, full, int(game_seed), num_games, num_eval_games, cache_dir
            )
        self.list_admissible = bool(list_admissible)
        commands: set[str] = set()
        self._words: set[str] = set()
        for path in dict.fromkeys([*self.train_files, *self.eval_files]):
            cmds, words = game_words(path)
            commands.update(cmds)
            self._words.update(words)
        self.action_names = tuple(sorted(commands))
        self._known = set(self.action_names)
        self.action_space = spaces.Discrete(len(self.action_names))
        self.observation_space = text_space(MAX_OBS_CHARS)
        self._infos = self.textworld.EnvInfos(
            description=True,
            inventory=True,
            objective=True,
            admissible_commands=True,
            facts=True,
            score=True,
            max_score=True,
            won=True,
            lost=True,
        )
        self._game = None
        self._game_path: str | None = None
        self._state = None
        self.feedback = ""

    # --- games ------------------------------------------------------------------------------------
    def game_for_seed(self, seed: int | None) -> str:
        """The game file that ``reset(seed)`` plays (module doc, "Games and seeds")."""
        if seed is None:
            return self.train_files[int(self.np_random.integers(len(self.train_files)))]
        if seed >= EVAL_SEED_BASE:
            return self.eval_files[(seed - EVAL_SEED_BASE) % len(self.eval_files)]
        return self.train_files[seed % len(self.train_files)]

    # --- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start (or restart) the seed's game."""
        super().reset(seed=seed)
        path = self.game_for_seed(seed)
        if path != self._game_path:
            self.close()
            with (
                warnings.catch_warnings()
            ):  # jericho: "not fully supported" (its own score detection; unused)
                warnings.filterwarnings("ignore", message=".*is not fully supported.*")
                self._game = self.textworld.start(path, request_infos=self._infos)
            self._game_path = path
        self._state = self._game.reset()
        self.feedback = ""  # the banner, the objective and the room: all shown by the other lines
        return self.observation_text(), self._info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        """Play the command ``action_names[action]`` if admissible; otherwise nothing happens."""
        if self._state is None:
            raise RuntimeError("TextWorldText.step() before reset(); call reset() first.")
        command = self.action_names[self._action_index(action)]
        if command not in self.admissible_actions():
            return self.observation_text(), 0.0, False, False, self._info(invalid=True)
        before = self._state["score"] or 0
        self._state, _, done = self._game.step(command)
        feedback = _clean(self._state["feedback"])
        self.feedback = "" if feedback == _clean(self._state["description"]) else feedback
        won = bool(self._state["won"])
        reward = float((self._state["score"] or 0) - before)
        return self.observation_text(), reward, bool(done or won), False, self._info(success=won)

    def admissible_actions(self) -> list[str]:
        """The game's admissible commands now (those its templates form; all of them, in practice)."""
        return [
            c
            for c in dict.fromkeys(map(normalize_action, self._state["admissible_commands"]))
            if c in self._known
        ]

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
        self._game, self._game_path = None, None

    # --- text -------------------------------------------------------------------------------------
    def anchor(self) -> str:
        """The hash of the state's facts (module doc, "Anchor")."""
        return state_anchor(self._state["facts"])

    def observation_text(self) -> str:
        """Goal, feedback, room, inventory and (``list_admissible``) the admissible commands."""
        s = self._state
        listing = (
            f"Admissible commands: {', '.join(self.admissible_actions())}" if self.list_admissible else None
        )
        return room_observation(
            f"Goal: {_clean(s['objective'])}",
            self.feedback,
            _clean(s["description"]),
            _clean(s["inventory"]),
            listing,
            MAX_OBS_CHARS,
        )

    def vocabulary(self) -> list[str]:
        """The words of the games' Inform 7 sources and commands, and the observation's labels."""
        return sorted(self._words | set(vocabulary_of([*PHRASES, *self.action_names])))


register_env("gigpo_lab/TextWorld-v0", TextWorldText, max_episode_steps=50)


Challenge = choice_enum("Challenge", CHALLENGES, __name__)


@dataclass
class TextWorldConfig(EnvConfig):
    """``gigpo_lab/TextWorld-v0`` (``gigpo_lab.envs.textworld_env.TextWorldText``): TextWorld games, generated
    from seeds into a cache or the user's own files (pip install 'gigpo_lab[textworld]')."""

    #: The game generator: coin_collector, treasure_hunter or cooking (textworld.challenges); unused with games.
    challenge: Challenge = Challenge.coin_collector
    #: The challenge's difficulty knobs, named as tw-make's flags: level (coin_collector 1-300, treasure_hunter
    #: 1-30); recipe, take, go (1, 6, 9 or 12), open, cook, cut, drop, recipe_seed, split (cooking). Null = defaults.
    settings: Optional[dict[str, Any]] = None  # noqa: UP045
    #: Training games generated from game_seed (reset seed s plays game s % num_games).
    num_games: int = default_of(TextWorldText, "num_games")  # type: ignore[assignment]
    #: Evaluation games, the same for every game_seed and disjoint from the training games.
    num_eval_games: int = default_of(TextWorldText, "num_eval_games")  # type: ignore[assignment]
    #: The seed the training games derive from; the presets pass the run's seed.
    game_seed: int = default_of(TextWorldText, "game_seed")  # type: ignore[assignment]
    #: The user's training games instead of generated ones: a glob or a list of .z8/.ulx files, each with the
    #: .json tw-make writes beside it; null = generate. A missing file, an empty glob or a game that does not
    #: load fails before the run opens.
    games: Optional[Any] = None  # noqa: UP045
    #: The user's evaluation games (a glob or a list); null with games = evaluate on the training games.
    eval_games: Optional[Any] = None  # noqa: UP045
    #: Root of the generated games' cache; null = $GIGPO_LAB_CACHE/textworld, else ~/.cache/gigpo_lab/textworld.
    cache_dir: Optional[str] = None  # noqa: UP045
    #: End the observation with the admissible commands, as verl-agent's ALFWorld prompt does.
    list_admissible: bool = default_of(TextWorldText, "list_admissible")  # type: ignore[assignment]


#: This module's schema of the ``env`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"env/textworld": TextWorldConfig}
