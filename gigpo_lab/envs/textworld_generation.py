"""Generating TextWorld games in worker processes: a game whose worker dies is retried once, then named.

:func:`generate` makes the games of the given seeds that the cache lacks (:mod:`gigpo_lab.envs.textworld_cache`
says when a game is there and how it is written whole). Several missing games are made in parallel by up to
``workers`` processes, each ``textworld_worker.main`` in a fresh interpreter (``WORKER``, the lab's own module):
it never imports the caller's main module, so a script without a main guard, a notebook, a joblib
or ``multiprocessing.Pool`` worker and any start method all work; the caller may hold torch's threads, a
worker imports only the package and textworld). Each worker makes one game after another (the first game of
a process costs about 2 s more: textworld loads its grammars), and the parent hands each game to one worker,
so it knows which game a worker that dies (the kernel's OOM killer under load, a signal) was making: that
game is handed to another worker once more, with a warning, and the dead worker is replaced. If the game's
worker dies a second time, :class:`GameGenerationError` says in one line which game (challenge, settings,
seed), how its worker ended, and what to do. A Python exception inside a worker is not retried (the same seed
would raise again); it is the same one-line error with the exception's type and message. One missing game is
made in this process.

Fault injection, for the tests: with ``GIGPO_LAB_FAULT_KILL_GAME_WORKER=<seed>:<times>:<tally file>`` in the
environment, a worker making the game of ``<seed>`` appends a line to the tally file and, while the file has
at most ``<times>`` lines, kills itself with SIGKILL after the game is compiled and before it is published,
as the OOM killer would.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from gigpo_lab.envs.textworld_cache import game_file, is_complete, publish, sweep_stale_temps, temp_folder

log = logging.getLogger(__name__)

#: The challenge names of the presets -> the names in ``textworld.challenges.CHALLENGES``.
CHALLENGES = {
    "coin_collector": "tw-coin_collector",
    "treasure_hunter": "tw-treasure_hunter",
    "cooking": "tw-cooking",
}
#: The fault-injection variable (module doc): ``<seed>:<times>:<tally file>``.
KILL_ENV = "GIGPO_LAB_FAULT_KILL_GAME_WORKER"
#: A worker's program: the lab's own module in a fresh interpreter (``-c``, not ``-m``: the package imports every
#: env module first, and runpy would warn that it had imported the worker's).
WORKER = "import sys; from gigpo_lab.envs.textworld_worker import main; sys.exit(main(sys.argv[1:]))"
#: How many times a game is handed to a worker before its worker's deaths stop the generation.
ATTEMPTS = 2


class GameGenerationError(RuntimeError):
    """A game could not be generated: its worker died twice, or raised; one line naming the game."""


def make_game(challenge: str, settings: dict[str, Any], seed: int, folder: str, before_publish=None) -> str:
    """Generate and compile the game of ``seed`` in a temporary folder and publish it into ``folder`` (unless
    it is already complete there); the ``.z8`` path. ``before_publish`` (no arguments) runs in between.

    Uses ``textworld.challenges.CHALLENGES[name][1]`` (``make(settings, options)``) and
    ``textworld.generator.compile_game(game, options)``, as ``tw-make`` does.
    """
    from gigpo_lab.envs.textworld_import import require_textworld

    textworld = require_textworld()
    if is_complete(Path(folder), seed):
        return str(game_file(Path(folder), seed))
    tmp = temp_folder(Path(folder), seed)
    try:
        options = textworld.GameOptions()
        options.seeds = seed
        options.path = str(game_file(tmp, seed))
        options.file_ext = ".z8"
        options.force_recompile = True
        _, make, _ = textworld.challenges.CHALLENGES[CHALLENGES[challenge]]
        game = make(settings=dict(settings), options=options)
        textworld.generator.compile_game(game, options)
        if before_publish is not None:
            before_publish()
        return str(publish(tmp, Path(folder), seed))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _die_if_told(seed: int) -> None:
    """The fault injection of the module doc: SIGKILL this process if ``KILL_ENV`` says so for ``seed``."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    target, times, tally = spec.split(":", 2)
    if int(target) != seed:
        return
    with open(tally, "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(tally) as f:
        count = len(f.read().splitlines())
    if count <= int(times):
        os.kill(os.getpid(), signal.SIGKILL)


def _ended(exitcode: int | None) -> str:
    """How a worker process ended, in words: ``killed by SIGKILL``, ``exit status 1``."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _describe(challenge: str, settings: dict[str, Any], seed: int) -> str:
    return f"TextWorld game g{seed} ({challenge}, settings {dict(settings)}, generation seed {seed})"


def _died_twice(challenge: str, settings: dict[str, Any], seed: int, folder: Path, how: str) -> Exception:
    why = (
        "most likely killed for memory; run fewer jobs beside it or free memory"
        if how == "killed by SIGKILL"
        else "its output above says why; fix that"
    )
    return GameGenerationError(
        f"{_describe(challenge, settings, seed)} could not be generated: its worker process died twice "
        f"({how}), {why}, then run again (the games already made stay in {folder})"
    )


class _Worker:
    """One worker process (``textworld_worker``) and the seed it is making (None: idle)."""

    def __init__(self, challenge: str, settings: dict[str, Any], folder: Path) -> None:
        argv = [sys.executable, "-c", WORKER, challenge, json.dumps(dict(settings)), str(folder)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.seed: int | None = None

    def give(self, seed: int) -> None:
        self.seed = seed
        self.proc.stdin.write(f"{seed}\n")
        self.proc.stdin.flush()

    def answer(self) -> tuple[str, str] | None:
        """Its answer, or None when it died instead (its stdout ended)."""
        line = self.proc.stdout.readline()
        return tuple(json.loads(line)) if line else None

    def stop(self, now: bool) -> None:
        """Close its stdin (it ends after its current game), or terminate it ``now``; then wait for it."""
        try:
            self.proc.stdin.close()
        except OSError:  # it has just died
            pass
        if now:
            self.proc.terminate()
        self.proc.wait()
        self.proc.stdout.close()


def _make_in_workers(
    challenge: str, settings: dict[str, Any], seeds: Sequence[int], folder: Path, workers: int
) -> None:
    """Make ``seeds`` with up to ``workers`` processes, each game handed to one worker at a time (module doc)."""
    todo, deaths = deque(seeds), dict.fromkeys(seeds, 0)
    busy: list[_Worker] = []
    stop_softly = False  # let the games being made finish (their files are kept for the next run)
    try:
        busy += [_Worker(challenge, settings, folder) for _ in range(min(workers, len(todo)))]
        while todo or any(w.seed is not None for w in busy):
            for worker in busy:
                if worker.seed is None and todo:
                    worker.give(todo.popleft())
            ready = set(wait([w.proc.stdout for w in busy if w.seed is not None]))
            for worker in [w for w in busy if w.proc.stdout in ready]:
                reply, seed = worker.answer(), worker.seed
                if reply is not None and reply[0] == "error":
                    raise GameGenerationError(
                        f"{_describe(challenge, settings, seed)} could not be generated: {reply[1]}"
                    )
                if reply is not None:
                    worker.seed = None
                    continue
                # the worker died: the game it was making goes back, once
                worker.stop(now=False)
                busy.remove(worker)
                sweep_stale_temps(folder)  # its temporary folder
                how = _ended(worker.proc.returncode)
                deaths[seed] += 1
                if deaths[seed] >= ATTEMPTS:
                    raise _died_twice(challenge, settings, seed, folder, how)
                log.warning(
                    "the worker generating %s died (%s); generating it once more",
                    _describe(challenge, settings, seed),
                    how,
                )
                todo.appendleft(seed)
                busy.append(_Worker(challenge, settings, folder))
        stop_softly = True
    except GameGenerationError:
        stop_softly = True
        raise
    finally:
        for worker in busy:
            worker.stop(now=not stop_softly)
        sweep_stale_temps(folder)


def generate(
    challenge: str, settings: dict[str, Any], seeds: Sequence[int], folder: Path, workers: int
) -> list[str]:
    """The ``.z8`` paths of the games of ``seeds`` in ``folder``, generating the missing ones (module doc)."""
    from gigpo_lab.errors import ConfigError

    if challenge not in CHALLENGES:
        raise ConfigError(f"env.challenge={challenge!r} is not one of {sorted(CHALLENGES)}")
    folder = Path(folder)
    missing = list(dict.fromkeys(s for s in seeds if not is_complete(folder, s)))
    if folder.is_dir():
        sweep_stale_temps(folder)
    if len(missing) == 1 or workers <= 1:
        for s in missing:
            make_game(challenge, settings, s, str(folder))
    elif missing:
        folder.mkdir(parents=True, exist_ok=True)
        _make_in_workers(challenge, settings, missing, folder, workers)
    return [str(game_file(folder, s)) for s in seeds]
