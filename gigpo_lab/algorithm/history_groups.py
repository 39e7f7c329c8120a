"""hgpo's nested history groups: for k = 0..K, the rows that share (group_id, s_t, s_{t-1}, …, s_{t-k}).

ALGORITHMS.md, "hgpo". A row (trajectory, t) with t < k has no level-k group in the recipe; here its missing
anchors s_{t-j}, j > t, take the value A (one past the A distinct anchors), so such a row only ever shares a
level-k group with rows equally short of history, and every level-k group is either all defined (t >= k) or
all undefined. The caller masks the undefined ones.

Cost. The deepest key packs into one int64 when n_groups * (A + 1) ** (K + 1) < 2**62 (the usual case: small
anchor sets, K of a few steps); then one sort of it orders every level at once, since each level's key is a
prefix of the deepest (``key // (A + 1) ** (K - k)``), and a level's groups start where its prefix changes.
Otherwise each level packs the one before with its anchor (``grouping.pack``, one rank a level; the ids are
lexicographic, so each level's ids are again a prefix order) and one sort of the deepest ids orders them. No
Python loop over rows or groups; a loop over the K + 1 levels.

Rows come back in one ``order`` (N,), the same for every level: the stable sort's, where each level's groups
are contiguous runs (so the statistics read memory in sequence). The caller gathers its values in that order
and scatters its result back once. The sort is stable, so the rows of a deepest-level group keep their batch
order: at K = 0 a segment sum adds gigpo's numbers in gigpo's order, bit for bit. A shallower group is a run
of deeper groups in the order of their keys, so its sum may differ from a batch-order sum in the last bits.

``level_segments`` then gives each level the rows that can carry an item (defined, in a group of two or
more). The deep levels are mostly singletons (1e6 rows of the benchmark's grid walks, K = 2: 58 % of the rows
are kept at level 1, 9 % at level 2), so a level with few kept rows computes on those alone. The kept rows of
level k are a subset of level k - 1's (a group of two or more lies inside one of two or more, and t >= k
implies t >= k - 1), so each level selects from the previous level's selection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import pack, rank
from gigpo_lab.algorithm.prepare import Rows

#: Keys below this bound are built and sorted as int32: the same stable order as int64, in about half the time
#: (1e6 rows, 1 thread: 13 ms against 30 ms for the sort).
INT32_KEYS = 2**31

#: A level whose kept rows are fewer than this share of the rows it starts from computes on those rows alone
#: (a gather of them and of their values); above it, on all of them with a mask, as the selection would cost
#: more than it saves (1e6 rows: ``nonzero`` alone takes about as long as a level's statistics on half of them).
SELECT_BELOW = 0.75


class HistoryLevel(NamedTuple):
    """One level k over the rows in the common ``order``: ``starts`` (N,) bool, true on the first row of each
    of the level's groups (every group is a contiguous run there), ``defined`` (N,) bool (t >= k) and
    ``groups``, the number of groups of defined rows (the recipe's clusters, before the singletons go)."""

    starts: torch.Tensor
    defined: torch.Tensor
    groups: int


class LevelSegments(NamedTuple):
    """The rows of one level that can carry an item: defined (t >= k) and in a group of two or more.

    ``rows`` (M,) int64, their places in the common ``order``, ascending, or None for all N rows; ``ids``
    (M,) int64 dense group ids 0..num-1 of those M rows; ``num``; ``kept`` (M,) bool, which of the M rows are
    defined and in a group of two or more, or None when all are (``rows`` then holds only those)."""

    rows: torch.Tensor | None
    ids: torch.Tensor
    num: int
    kept: torch.Tensor | None


def history_levels(rows: Rows, depth: int) -> tuple[torch.Tensor, list[HistoryLevel]]:
    """(``order`` (N,) int64, a permutation of the rows, and the K + 1 = ``depth`` + 1 levels of nested
    groups of ``rows`` in that order). Needs the rows' ``anchor``, ``group``, ``step`` and layout."""
    import torch

    anchor, n_anchors = rank(rows.anchor)  # dense 0..A-1
    position, length = rows.layout.position, rows.layout.length
    width = n_anchors + 1  # value n_anchors = "no step there"
    span = rows.n_groups * width ** (depth + 1)
    if span >= 2**62:
        backs = _backs_in_layout(anchor, position, length, n_anchors, depth)
        return _by_level(rows, [back.index_select(0, position) for back in backs])
    # the same values in int32 sort to the same order, about twice as fast as int64 on the CPU
    dtype = torch.int32 if span < INT32_KEYS else torch.int64
    backs = _backs_in_layout(anchor.to(dtype), position, length, n_anchors, depth)
    packed = backs[0]
    for back in backs[1:]:
        packed = packed * width + back  # sum_j s_{t-j} W^(K-j), in (traj, t) order
    full = rows.group.to(dtype) * width ** (depth + 1) + packed.index_select(0, position)
    return _by_one_sort(full, width, depth)


def level_segments(levels: list[HistoryLevel]) -> Iterator[LevelSegments]:
    """Each level's rows that can carry an item, and their dense group ids (see the module docstring)."""
    rows = None  # the previous level's selection, which holds every kept row of this level
    for level in levels:
        starts, defined = level.starts, level.defined
        if rows is not None:
            starts, defined = starts.index_select(0, rows), defined.index_select(0, rows)
        alone = starts.clone()
        alone[:-1] &= starts[1:]  # a run of one row: it starts a group and the next row starts another
        kept = defined & ~alone
        if int(kept.sum()) < SELECT_BELOW * kept.numel():
            chosen = kept.nonzero().squeeze(1)  # whole groups, so each keeps its first row (its start)
            rows = chosen if rows is None else rows.index_select(0, chosen)
            starts, kept = starts.index_select(0, chosen), None
        ids = starts.long().cumsum(0) - 1  # (a bool cumsum takes a slower path)
        yield LevelSegments(rows, ids, int(ids[-1]) + 1 if ids.numel() else 0, kept)


def _backs_in_layout(
    anchor: torch.Tensor, position: torch.Tensor, length: torch.Tensor, n_anchors: int, depth: int
) -> list[torch.Tensor]:
    """s_{t-j} for j = 0..K, each (N,) in (traj, t) order and in ``anchor``'s dtype (int32 or int64),
    ``n_anchors`` where t < j. ``anchor`` (N,) is in batch order, ``position`` (N,) its place in (traj, t)
    order and ``length`` (n_traj,) the trajectories' T. A trajectory is a contiguous run there, so s_{t-j} is
    the run shifted by j places (a slice, no gather); the first j places of each run, which the shift fills
    from the run before, then take ``n_anchors``."""
    import torch

    anchor_at = torch.empty_like(anchor).scatter_(0, position, anchor)
    first = torch.cumsum(length, 0) - length  # (n_traj,) where each run starts
    backs = [anchor_at]
    for j in range(1, depth + 1):
        back = torch.full_like(anchor_at, n_anchors)
        back[j:] = anchor_at[:-j]
        for t in range(j):  # the runs' first j places: a loop over steps below K, not over rows
            back[first[length > t] + t] = n_anchors
        backs.append(back)
    return backs


def _by_one_sort(full: torch.Tensor, width: int, depth: int) -> tuple[torch.Tensor, list[HistoryLevel]]:
    """The levels from the deepest keys ``full`` (N,) int32 or int64, group_id * W^(K+1) + sum_j s_{t-j}
    W^(K-j): one stable sort, then level k's prefix is the key // W^(K-k) and its last digit s_{t-k}, which
    is the filler W - 1 exactly where t < k."""
    import torch

    ordered, order = torch.sort(full, stable=True)
    levels, above = [], None
    for k in range(depth + 1):
        # (N,) sorted; the keys are >= 0, so truncation is the floor, and cheaper than rounding_mode="floor"
        prefix = torch.div(ordered, width ** (depth - k), rounding_mode="trunc")
        if above is None:  # level 0: s_t is always there
            defined = torch.ones_like(prefix, dtype=torch.bool)
        else:
            defined = (prefix - above * width) != width - 1
        levels.append(_level(prefix, defined))
        above = prefix
    return order, levels


def _by_level(rows: Rows, backs: list[torch.Tensor]) -> tuple[torch.Tensor, list[HistoryLevel]]:
    import torch

    per_level = []
    ids, num = rows.group, rows.n_groups
    for back in backs:
        ids, num = pack(ids, num, back)  # lexicographic in (previous ids, anchor): a prefix order again
        per_level.append(ids)
    order = torch.sort(per_level[-1], stable=True).indices
    steps = rows.step.index_select(0, order)
    levels = [_level(ids.index_select(0, order), steps >= k) for k, ids in enumerate(per_level)]
    return order, levels


def _level(sorted_key: torch.Tensor, defined: torch.Tensor) -> HistoryLevel:
    """The level whose groups are the runs of equal values of ``sorted_key`` (N,); ``defined`` (N,) bool."""
    import torch

    starts = torch.ones_like(sorted_key, dtype=torch.bool)
    starts[1:] = sorted_key[1:] != sorted_key[:-1]
    return HistoryLevel(starts, defined, int((starts & defined).sum()))
