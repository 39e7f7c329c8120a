"""Benchmarks with declared folds (TextWorldExpress, ScienceWorld): which game instance a seed plays, and the
command vocabulary of the instances a run can play.

**Seeds.** A run plays a fixed, finite set of instances: the first ``num_games`` of the train fold and the first
``num_eval_games`` of the evaluation fold (``dev`` by default; ``test`` is kept for final reports)::

    reset seed s < EVAL_SEED_BASE         -> train[s % num_games]
    reset seed EVAL_SEED_BASE + k         -> eval_fold[k % num_eval_games]
    reset seed None                       -> a train instance drawn from the env's RNG

The trainer's group seeds (``seed * 10_000_000 + i``) and evaluation seeds (``EVAL_SEED_BASE + k``) thus land in
the train and the evaluation fold, and the envs of a group, which share a seed, play one instance.

**Commands.** An env of the lab has a fixed list of commands (``action_names``: its ``Discrete`` space, the tiny
policy's one-token commands), while these benchmarks produce their valid commands state by state. The list is
the union of the valid commands seen while exploring every instance of the run (its gold path, and random
walks from its start), computed once and cached on disk (:func:`cached_exploration`); the words of every text
seen join the vocabulary the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gigpo_lab.cache_root import cache_root
from gigpo_lab.envs.textworld_env import EVAL_SEED_BASE
from gigpo_lab.errors import ConfigError

#: The folds a run may evaluate on: dev while developing, test for final reports.
EVAL_FOLDS = ("dev", "test")

#: Both libraries' own step limit (``envStepLimit``), the envs' ``step_limit`` default; a config sets it to
#: ``env.max_turns``.
LIBRARY_STEP_LIMIT = 100


def fold_instances(name: str, fold: str, available: Sequence[int], count: Any) -> list[int]:
    """The first ``count`` instances (seeds or variations) of a fold; a ConfigError if the fold has fewer."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"env.{name}={count!r} must be an int >= 1")
    if count > len(available):
        raise ConfigError(f"env.{name}={count} but the {fold} fold has {len(available)} instances; lower it")
    return [int(x) for x in list(available)[:count]]


def instance_for_seed(
    seed: int | None, train: Sequence[int], held_out: Sequence[int], rng
) -> tuple[str, int]:
    """(fold role, instance) that ``reset(seed)`` plays (module doc): ``("train", i)`` or ``("eval", i)``."""
    if seed is None:
        return "train", int(train[int(rng.integers(len(train)))])
    if seed >= EVAL_SEED_BASE:
        return "eval", int(held_out[(seed - EVAL_SEED_BASE) % len(held_out)])
    return "train", int(train[seed % len(train)])


def _cache_file(kind: str, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / kind / f"commands-{digest}.json"


def cached_exploration(
    kind: str, key: dict[str, Any], explore: Callable[[], tuple[set[str], set[str]]]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sorted commands, sorted words) of ``explore()``, cached under ``cache_root()/kind`` by ``key`` (which
    must name everything the result depends on: the game, its settings, the instances, the library version).
    The file is written whole (a temporary file renamed), so a concurrent reader sees it whole or not at all."""
    path = _cache_file(kind, key)
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            return tuple(data["commands"]), tuple(data["words"])
        except (OSError, ValueError, KeyError):
            pass  # a damaged file is recomputed
    commands, words = explore()
    result = tuple(sorted(commands)), tuple(sorted(words))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"key": key, "commands": result[0], "words": result[1]}, f)
    os.replace(tmp, path)
    return result
