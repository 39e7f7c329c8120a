"""The seeds a run draws from: per-iteration RNG seeds, env group seeds, the held-out evaluation seeds and their
sampling streams.

Every stream is a function of the run's seed and a position (iteration, rank, collection), never of the global
RNG, so a resumed run draws exactly what an uninterrupted one draws (docs/FAULTS.md, "Determinism").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Seeds of held-out evaluation episodes start here; training seeds stay below it.
EVAL_SEED_BASE = 1_000_000_000
#: A run's group seeds are ``seed * 10_000_000 + i``: the first collection of each iteration takes i below this,
#: a group filter's extra collections (``extra_group_seeds``) i from it.
EXTRA_SEED_OFFSET = 5_000_000


def iteration_seed(seed: int, iteration: int) -> int:
    """A per-iteration RNG seed, so that a resumed run draws exactly what an uninterrupted one draws."""
    return (seed * 1_000_003 + iteration * 7_919 + 17) % (2**63 - 1)


def group_seeds(seed: int, shard: int, groups: int) -> list[int]:
    """The B group seeds of shard ``shard`` (iteration it, rank r of a world of W: shard it * W + r): disjoint
    across ranks and iterations."""
    first = shard * groups
    return [seed * 10_000_000 + first + b for b in range(groups)]


def extra_group_seeds(seed: int, shard: int, groups: int, collection: int, max_collections: int) -> list[int]:
    """The B group seeds of extra collection ``collection`` (1 .. max_collections - 1) of shard ``shard``: a
    function of the run's seed, the shard (iteration and rank) and the collection alone, so a resumed run draws
    what the uninterrupted one would; disjoint from every first collection's seeds (``EXTRA_SEED_OFFSET``) and
    from every other shard's extras (each shard owns ``max_collections - 1`` blocks of B)."""
    block = shard * (max_collections - 1) + collection - 1
    return [seed * 10_000_000 + EXTRA_SEED_OFFSET + block * groups + b for b in range(groups)]


def eval_seeds(episodes: int) -> list[int]:
    """The seeds of the held-out evaluation episodes, the same at every evaluation."""
    return [EVAL_SEED_BASE + i for i in range(episodes)]


def eval_stream_seed(seed: int, episode: int) -> int:
    """The seed of held-out episode ``episode``'s own sampling stream, the same at every evaluation: a function of
    the run's seed and the episode alone, so the episode draws the same tokens whichever rank, and whichever
    other episodes, it is played beside. Disjoint from every training iteration's seed (``iteration_seed`` at a
    negative position)."""
    return iteration_seed(seed, -1 - episode)


def eval_streams(seed: int, episodes: Iterable[int]) -> list[torch.Generator]:
    """One sampling stream per held-out episode index in ``episodes``, each seeded with ``eval_stream_seed``."""
    import torch

    return [torch.Generator().manual_seed(eval_stream_seed(seed, i)) for i in episodes]
