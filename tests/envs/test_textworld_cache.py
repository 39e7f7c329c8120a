"""TextWorld game generation under faults (issue #44): real games, real worker processes killed with SIGKILL.

A worker that dies is retried once in a new process; one that dies twice stops generation with one line
naming the game; a game is in the cache whole or not at all, and a half-written one (files without their
marker, a truncated file, a killed worker's temporary folder) is never read but generated again. The
workers are killed by the fault-injection variable of ``gigpo_lab.envs.textworld_generation`` (the worker
sends itself SIGKILL after compiling its game, before publishing it), as the kernel's OOM killer would.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textworld")

from gigpo_lab.envs.textworld_cache import (  # noqa: E402
    TEMP_PREFIX,
    game_file,
    is_complete,
    marker_file,
    sweep_stale_temps,
)
from gigpo_lab.envs.textworld_games import game_digest  # noqa: E402
from gigpo_lab.envs.textworld_generation import KILL_ENV, GameGenerationError, generate  # noqa: E402

LEVEL_1 = {"level": 1}
KILLED_SEED = 12


def _leftovers(folder: Path) -> list[str]:
    """Temporary folders and game files without a complete marker in ``folder``."""
    temps = [p.name for p in folder.glob(f"{TEMP_PREFIX}*")]
    seeds = {p.stem[1:] for p in folder.glob("g*.*")}
    return temps + [f"g{s}" for s in sorted(seeds) if not is_complete(folder, int(s))]


def _dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def test_a_game_worker_killed_once_is_retried_and_every_game_is_whole(tmp_path, monkeypatch, caplog):
    tally = tmp_path / "attempts"
    monkeypatch.setenv(KILL_ENV, f"{KILLED_SEED}:1:{tally}")
    folder = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="gigpo_lab.envs.textworld_generation"):
        paths = generate("coin_collector", LEVEL_1, [11, KILLED_SEED], folder, workers=2)
    assert len(tally.read_text().splitlines()) == 2, "killed once, then made by a second worker"
    assert [Path(p).name for p in paths] == ["g11.z8", f"g{KILLED_SEED}.z8"]
    assert all(is_complete(folder, s) for s in (11, KILLED_SEED)) and not _leftovers(folder)
    assert game_digest(paths[1]), "the retried game loads"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"g{KILLED_SEED}" in warning and "died (killed by SIGKILL); generating it once more" in warning


def test_a_game_worker_killed_twice_fails_in_one_line_naming_the_game(tmp_path, monkeypatch):
    tally = tmp_path / "attempts"
    monkeypatch.setenv(KILL_ENV, f"{KILLED_SEED}:2:{tally}")
    folder = tmp_path / "cache"
    with pytest.raises(GameGenerationError) as caught:
        generate("coin_collector", LEVEL_1, [11, KILLED_SEED], folder, workers=2)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"TextWorld game g{KILLED_SEED} (coin_collector, settings {{'level': 1}}, generation seed {KILLED_SEED}) "
        "could not be generated: its worker process died twice (killed by SIGKILL)"
    )
    assert "run fewer jobs beside it or free memory, then run again" in message and str(folder) in message
    assert len(tally.read_text().splitlines()) == 2
    assert is_complete(folder, 11), "the other game is made and kept"
    assert not game_file(folder, KILLED_SEED).exists() and not marker_file(folder, KILLED_SEED).exists()
    assert not list(folder.glob(f"{TEMP_PREFIX}*")), "the dead workers' temporary folders are removed"


def test_a_half_written_game_is_not_read_and_is_generated_again(tmp_path):
    folder = tmp_path / "cache"
    (path,) = generate("coin_collector", LEVEL_1, [11], folder, workers=1)
    whole = {p.name: p.read_bytes() for p in folder.glob("g11.*")}
    assert sorted(whole) == ["g11.done", "g11.json", "g11.ni", "g11.z8"] and is_complete(folder, 11)

    z8, json_file, marker = Path(path), Path(path).with_suffix(".json"), marker_file(folder, 11)
    z8.write_bytes(whole["g11.z8"][:1000])  # a truncated story under a marker that lists its full size
    assert not is_complete(folder, 11)
    z8.write_bytes(whole["g11.z8"])
    marker.unlink()  # whole files, but a publish killed before its marker (or a cache of an older lab)
    assert not is_complete(folder, 11)
    marker.write_text(whole["g11.done"].decode()[:20])  # a marker cut short
    assert not is_complete(folder, 11)

    # the state a worker killed while publishing leaves: a truncated file, no marker, its temporary folder
    marker.unlink()
    json_file.write_bytes(whole["g11.json"][:100])
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())
    dead = folder / f"{TEMP_PREFIX}11-{host}-{_dead_pid()}-abc"
    alive = folder / f"{TEMP_PREFIX}11-{host}-{__import__('os').getpid()}-def"
    elsewhere = folder / f"{TEMP_PREFIX}11-otherhost-{_dead_pid()}-ghi"
    for temp in (dead, alive, elsewhere):
        temp.mkdir()
        (temp / "g11.z8").write_bytes(b"half")
    (again,) = generate("coin_collector", LEVEL_1, [11], folder, workers=1)
    assert again == path and is_complete(folder, 11)
    assert json_file.read_bytes() == whole["g11.json"] and z8.stat().st_size == len(whole["g11.z8"])
    assert game_digest(again)
    assert not dead.exists() and alive.exists() and elsewhere.exists(), (
        "only a gone process's folder of this host"
    )
    assert sweep_stale_temps(folder) == []
