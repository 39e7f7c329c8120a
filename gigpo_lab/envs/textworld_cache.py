"""The generated TextWorld games on disk: a game in the cache is whole or it is not there.

A game of generation seed ``s`` is three files in its preset's folder, ``g<s>.ni`` (Inform 7 source),
``g<s>.json`` (the game) and ``g<s>.z8`` (the compiled story), and a marker ``g<s>.done`` that lists their
sizes. The game counts as present only when the marker reads and every file has the size it lists
(:func:`is_complete`); anything else (no marker, a truncated or missing file, a marker cut short) is
generated again and overwritten. A generator works in a temporary folder inside the cache folder
(:func:`temp_folder`, named after the seed, the host and the process id) and then :func:`publish` removes
the marker, moves each file in with ``os.replace`` (atomic on one file system) and writes the marker last,
itself through a temporary file and ``os.replace``. So a generator killed at any point leaves either the
previous complete game, or files without a marker, or a stray temporary folder, and a later run reads none
of them: it regenerates the game, and :func:`sweep_stale_temps` removes the temporary folders of processes
of this host that are gone. Two runs generating one game at once write the same game (the seed fixes it);
whichever publishes last wins, and each run reads the files only after its own publish has returned.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

#: The files of one game, in the order :func:`publish` moves them in (the compiled story last).
GAME_SUFFIXES = (".ni", ".json", ".z8")
#: The marker beside a complete game: ``{"g<s>.ni": size, "g<s>.json": size, "g<s>.z8": size}``.
MARKER_SUFFIX = ".done"
#: The start of a generator's temporary folder: ``.tmp-g<seed>-<host>-<pid>-<random>``.
TEMP_PREFIX = ".tmp-g"


def game_file(folder: Path, seed: int) -> Path:
    """The compiled story of the game of ``seed`` (``g<seed>.z8``): the path the env plays."""
    return Path(folder) / f"g{seed}.z8"


def marker_file(folder: Path, seed: int) -> Path:
    """The marker that says the game of ``seed`` is complete (``g<seed>.done``)."""
    return Path(folder) / f"g{seed}{MARKER_SUFFIX}"


def is_complete(folder: Path, seed: int) -> bool:
    """True when the marker of ``seed`` reads and each of the game's files has the size it lists."""
    try:
        sizes = json.loads(marker_file(folder, seed).read_text())
    except (OSError, ValueError):
        return False
    names = {f"g{seed}{suffix}" for suffix in GAME_SUFFIXES}
    if not isinstance(sizes, dict) or set(sizes) != names:
        return False
    try:
        return all((Path(folder) / name).stat().st_size == size for name, size in sizes.items())
    except OSError:
        return False


def _host() -> str:
    """This host's name, as it can stand in a file name."""
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


def temp_folder(folder: Path, seed: int) -> Path:
    """A new temporary folder inside ``folder`` for generating the game of ``seed``."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    prefix = f"{TEMP_PREFIX}{seed}-{_host()}-{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=folder))


def publish(tmp: Path, folder: Path, seed: int) -> Path:
    """Move the game of ``seed`` from ``tmp`` into ``folder`` and write its marker last; the ``.z8`` path."""
    marker_file(folder, seed).unlink(missing_ok=True)  # while files are replaced, the game is not complete
    sizes = {}
    for suffix in GAME_SUFFIXES:
        name = f"g{seed}{suffix}"
        sizes[name] = (Path(tmp) / name).stat().st_size
        os.replace(Path(tmp) / name, Path(folder) / name)
    partial = Path(tmp) / f"g{seed}{MARKER_SUFFIX}"
    partial.write_text(json.dumps(sizes, sort_keys=True))
    os.replace(partial, marker_file(folder, seed))
    return game_file(folder, seed)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_temps(folder: Path) -> list[Path]:
    """Remove the temporary folders in ``folder`` left by generators of this host that are gone (a killed
    worker's); those of live processes and of other hosts (a shared cache) are kept. The removed folders."""
    removed = []
    host = _host()
    for path in Path(folder).glob(f"{TEMP_PREFIX}*"):
        parts = path.name[len(TEMP_PREFIX) :].split("-")
        if len(parts) < 4 or parts[1] != host or not parts[2].isdigit() or _alive(int(parts[2])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
