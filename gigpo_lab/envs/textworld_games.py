"""TextWorld game files: generated from seeds into a cache folder (in parallel, once), or the user's own.

Generated games. A challenge of ``textworld.challenges.CHALLENGES`` (``tw-coin_collector``,
``tw-treasure_hunter``, ``tw-cooking``; each entry is ``(desc, make, add_arguments)``) makes a
``textworld.Game`` from its difficulty settings and a ``textworld.GameOptions`` whose ``seeds`` fix the
game; ``textworld.generator.compile_game`` writes ``<name>.json`` (the game: world, facts, quests) and
``<name>.ni`` (its Inform 7 source) and compiles ``<name>.z8``. This is what ``tw-make`` does.

Cache layout::

    <cache root>/<challenge>-<hash of challenge, settings and textworld's version>/
        g<generation seed>.z8  .json  .ni  .done

The cache root is ``env.cache_dir``, else ``$GIGPO_LAB_CACHE/textworld``, else ``~/.cache/gigpo_lab/textworld``.
A game's generation seed derives from (run seed, ``train``, index) for the training games and from
(``eval``, index) for the evaluation games, so every run evaluates on the same games and training games
never include one of them (a generated training game whose initial state and objective equal an evaluation
game's is replaced by the next seed). A game is whole or absent: it is written in a temporary folder inside
the cache and moved in, its ``.done`` marker (the files' sizes) last, and only a game whose marker matches
its files is read (:mod:`gigpo_lab.envs.textworld_cache`). Missing games are generated in parallel by worker
processes, each game handed to one worker; a game whose worker dies is retried once, then the run stops
with one line naming the game (:mod:`gigpo_lab.envs.textworld_generation`).

User games: ``games`` and ``eval_games`` are a glob or a list of files or globs of compiled games
(``.z8`` or ``.ulx``) each with its ``.json`` beside it (``tw-make`` writes both). :func:`resolve_user_games`
checks them and raises a one-line :class:`~gigpo_lab.errors.ConfigError` for a missing file, a glob that
matches nothing, or a game that does not load.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from gigpo_lab.cache_root import cache_root
from gigpo_lab.envs.textworld_generation import generate
from gigpo_lab.envs.textworld_import import require_textworld
from gigpo_lab.errors import ConfigError

#: The file extensions of compiled games that ``textworld.start`` plays.
GAME_EXTENSIONS = (".z8", ".ulx")
#: How many generation seeds past the needed ones to try when a training game repeats an evaluation game.
_MAX_EXTRA_SEEDS = 1000


def default_cache_root() -> Path:
    """``$GIGPO_LAB_CACHE/textworld``, else ``~/.cache/gigpo_lab/textworld``."""
    return cache_root() / "textworld"


def preset_folder(challenge: str, settings: dict[str, Any], cache_dir: str | None = None) -> Path:
    """The cache folder of one challenge and its settings (textworld's version joins the hash)."""
    textworld = require_textworld()
    key = json.dumps(
        {"challenge": challenge, "settings": settings, "textworld": textworld.__version__}, sort_keys=True
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_root()
    return root / f"{challenge}-{digest}"


def generation_seed(*parts: Any) -> int:
    """A generation seed in [0, 2**31) from ``parts`` (``(run_seed, "train", i)`` or ``("eval", i)``)."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "big") >> 1


@lru_cache(maxsize=4096)
def _game_digest(json_path: str, mtime: float) -> str:
    """A digest of a game's initial state and objective (two seeds may make the same small game)."""
    from textworld.generator.game import Game

    game = Game.load(json_path)
    names = {k: v.name or k for k, v in game.infos.items()}
    facts = sorted(
        f"{p.name}({','.join(names.get(a.name, a.name) for a in p.arguments)})" for p in game.world.facts
    )
    return hashlib.sha256(json.dumps([facts, game.objective]).encode()).hexdigest()


def game_digest(path: str) -> str:
    """:func:`_game_digest` of the game ``path`` (its ``.json``), memoised per file version."""
    json_path = str(Path(path).with_suffix(".json"))
    return _game_digest(json_path, os.path.getmtime(json_path))


def generated_games(
    challenge: str,
    settings: dict[str, Any],
    run_seed: int,
    num_games: int,
    num_eval_games: int,
    cache_dir: str | None = None,
    workers: int | None = None,
) -> tuple[list[str], list[str]]:
    """(training games, evaluation games) of a run: generated once into the preset's cache folder.

    Evaluation games depend only on the preset; training games on the run seed too, and none of them has an
    evaluation game's initial state and objective.
    """
    folder = preset_folder(challenge, settings, cache_dir)
    workers = workers or max(1, min(8, os.cpu_count() or 1))
    eval_seeds = [generation_seed("eval", i) for i in range(num_eval_games)]
    train_seeds = [generation_seed(run_seed, "train", i) for i in range(num_games)]
    games = generate(challenge, settings, [*eval_seeds, *train_seeds], folder, workers)  # made together
    evals, trains = games[:num_eval_games], games[num_eval_games:]
    held_out = {game_digest(p) for p in evals}
    extra = num_games
    for i, path in enumerate(trains):
        while game_digest(path) in held_out:
            if extra >= num_games + _MAX_EXTRA_SEEDS:
                raise ConfigError(
                    f"env.challenge={challenge} with {settings} has too few distinct games for "
                    f"{num_games} training games besides {num_eval_games} evaluation games; lower env.num_games "
                    "or raise the difficulty"
                )
            (path,) = generate(challenge, settings, [generation_seed(run_seed, "train", extra)], folder, 1)
            extra += 1
        trains[i] = path
    return trains, evals


def _expand(key: str, spec: str | Sequence[str]) -> list[str]:
    """A glob or a list of files and globs -> sorted game files; a missing file or an empty glob is an error."""
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items:
        raise ConfigError(f"env.{key}=[] names no game; give a glob or a list of .z8/.ulx files")
    files: list[str] = []
    for item in items:
        item = str(Path(str(item)).expanduser())
        if globlib.has_magic(item):
            matches = sorted(m for m in globlib.glob(item, recursive=True) if m.endswith(GAME_EXTENSIONS))
            if not matches:
                raise ConfigError(f"env.{key}: the glob {item!r} matches no .z8 or .ulx game file")
            files.extend(matches)
        elif not Path(item).is_file():
            raise ConfigError(f"env.{key}: the game file {item!r} does not exist")
        else:
            files.append(item)
    return list(dict.fromkeys(files))


#: The child that loads each game it is given (jericho ends the whole process on a broken story file, so the
#: loading runs apart): "ok <path>" after each one that ``textworld.start(path).reset()`` plays.
_LOADER = """
import sys, warnings
warnings.filterwarnings("ignore")
import textworld
for path in sys.argv[1:]:
    env = textworld.start(path, request_infos=textworld.EnvInfos(facts=True, admissible_commands=True))
    env.reset()
    env.close()
    print("ok", path, flush=True)
"""
#: (path, mtime) of the game files that loaded, in this process.
_LOADED: set[tuple[str, float]] = set()


def _unplayable(paths: Sequence[str]) -> tuple[str, str] | None:
    """The first of ``paths`` that TextWorld cannot play and why, or None; loaded in one child process."""
    for path in paths:
        if not path.endswith(GAME_EXTENSIONS):
            return path, f"it is not a compiled game ({', '.join(GAME_EXTENSIONS)}); compile it with tw-make"
        if not Path(path).with_suffix(".json").is_file():
            return path, "its .json (written beside it by tw-make) is missing"
    todo = [p for p in paths if (p, os.path.getmtime(p)) not in _LOADED]
    if not todo:
        return None
    done = subprocess.run([sys.executable, "-c", _LOADER, *todo], capture_output=True, text=True, check=False)
    ok = {line[3:] for line in done.stdout.splitlines() if line.startswith("ok ")}
    _LOADED.update((p, os.path.getmtime(p)) for p in ok)
    for path in todo:
        if path not in ok:
            lines = [ln.strip() for ln in done.stderr.strip().splitlines() if ln.strip()]
            why = lines[-1][:200] if lines else f"the loader exited with status {done.returncode}"
            return path, f"it does not load ({why})"
    return None


def resolve_user_games(key: str, spec: str | Sequence[str]) -> list[str]:
    """The game files of ``env.<key>`` (a glob or a list), each checked to load; a one-line ConfigError if not."""
    files = _expand(key, spec)
    bad = _unplayable(files)
    if bad:
        raise ConfigError(f"env.{key}: the game {bad[0]!r} cannot be played: {bad[1]}")
    return files


def check_env_config(env_cfg: Any) -> None:
    """The pre-run check of ``env=textworld``'s user games (``validate_config`` calls it): a one-line
    ConfigError for a missing file, an empty glob, a game that does not load, or ``eval_games`` without
    ``games``. Generated games are made later, when the env is built (still before the run opens)."""
    games, eval_games = env_cfg.get("games"), env_cfg.get("eval_games")
    if games is None and eval_games is not None:
        raise ConfigError("env.eval_games is set but env.games is not; give env.games=<glob or list> too")
    if games is not None:
        require_textworld()
        resolve_user_games("games", games)
        if eval_games is not None:
            resolve_user_games("eval_games", eval_games)
