"""hgpo's nested history groups (gigpo_lab/algorithm/history_groups.py): the one-sort path and the per-level
path give the partition that a dict of history tuples gives, on the same rows, and hgpo gives the same
advantages through either; ``level_segments`` keeps exactly the rows that can carry an item, and whether it
selects them or masks them does not change a bit of hgpo's result."""

from __future__ import annotations

import torch
from advantage_oracle import Row, batches, columns, hgpo
from hypothesis import given
from hypothesis import strategies as st
from property_examples import examples

from gigpo_lab.algorithm import compute_advantages, history_groups
from gigpo_lab.algorithm.grouping import rank
from gigpo_lab.algorithm.hgpo import HGPO
from gigpo_lab.algorithm.history_groups import (
    _backs_in_layout,
    _by_level,
    _by_one_sort,
    history_levels,
    level_segments,
)
from gigpo_lab.algorithm.prepare import prepare_rows

EXAMPLES = examples(70, 400)


def oracle_partition(rows, k):
    """Level-k key of each row in batch order, from plain tuples: (group, s_t, ..., s_{t-k}); None where t < k."""
    anchors = {(r.traj, r.step): r.anchor for r in rows}
    return [
        (r.group, *(anchors[(r.traj, r.step - j)] for j in range(k + 1))) if r.step >= k else None
        for r in rows
    ]


def partition_of(order, level, n):
    """Level ids in batch order (N,) list (one per run of the level's ``starts``), and which rows are defined,
    from ``order`` and a HistoryLevel."""
    runs = level.starts.long().cumsum(0) - 1
    ids = torch.empty(n, dtype=torch.int64).scatter_(0, order, runs)
    defined = torch.empty(n, dtype=torch.bool).scatter_(0, order, level.defined)
    return ids.tolist(), defined.tolist()


def same_partition(a, b):
    """True when the labels ``a`` and ``b`` (equal length) group the positions the same way."""
    pairs = set(zip(a, b, strict=True))
    return len(pairs) == len(set(a)) == len(set(b))


def prepared(rows):
    return prepare_rows("hgpo", HGPO().requires, (), columns(rows))


@EXAMPLES
@given(rows=batches(max_steps=7, n_anchors=3), depth=st.integers(0, 5))
def test_both_paths_give_the_tuple_partition(rows, depth):
    prep = prepared(rows)
    for order, levels in (history_levels(prep, depth), _by_level_of(prep, depth)):
        assert sorted(order.tolist()) == list(range(len(rows)))
        for k, level in enumerate(levels):
            ids, defined = partition_of(order, level, len(rows))
            want = oracle_partition(rows, k)
            assert defined == [key is not None for key in want]
            keys = [key for key in want if key is not None]
            got = [i for i, d in zip(ids, defined, strict=True) if d]
            assert same_partition(got, keys)  # so each key is one run: the groups are contiguous
            assert level.groups == len(set(keys))
            # the undefined rows never share a group with a defined one
            assert not {i for i, d in zip(ids, defined, strict=True) if d} & {
                i for i, d in zip(ids, defined, strict=True) if not d
            }


def _by_level_of(prep, depth):
    """The per-level path on the same rows (history_levels takes it only past int64)."""
    return _by_level(prep, list(_backs(prep, depth)))


def _backs(prep, depth):
    anchor, n_anchors = rank(prep.anchor)
    position = prep.layout.position
    at = torch.empty_like(anchor).scatter_(0, position, anchor)
    for j in range(depth + 1):
        back = at.index_select(0, (position - j).clamp(min=0))
        yield torch.where(prep.step >= j, back, torch.full_like(back, n_anchors))


@EXAMPLES
@given(rows=batches(max_steps=7, n_anchors=3), depth=st.integers(0, 8))
def test_the_shifted_runs_are_the_previous_anchors_of_each_row(rows, depth):
    """``_backs_in_layout`` shifts each trajectory's run in (traj, t) order; gathered back to the rows, it is
    s_{t-j} read row by row (``_backs``, one gather per j), with the filler where t < j."""
    prep = prepared(rows)
    anchor, n_anchors = rank(prep.anchor)
    shifted = _backs_in_layout(anchor, prep.layout.position, prep.layout.length, n_anchors, depth)
    for got, want in zip(shifted, _backs(prep, depth), strict=True):
        assert torch.equal(got.index_select(0, prep.layout.position), want)


@EXAMPLES
@given(rows=batches(max_steps=7, n_anchors=3), depth=st.integers(0, 5))
def test_the_one_sort_path_keeps_each_groups_batch_order(rows, depth):
    """Stable: inside a deepest-level group, rows keep their batch order (so at K = 0 the segment sums add in
    gigpo's order, bit for bit); a shallower group is a run of deeper groups, in the order of their keys."""
    prep = prepared(rows)
    anchor_rank = {a: i for i, a in enumerate(sorted({r.anchor for r in rows}))}
    width = len(anchor_rank) + 1
    full = prep.group.clone()
    for back in _backs(prep, depth):
        full = full * width + back
    order, levels = _by_one_sort(full, width, depth)
    same = ~levels[-1].starts[1:]
    assert bool((order[1:][same] > order[:-1][same]).all())
    for deeper, level in zip(levels[1:], levels[:-1], strict=False):  # nested: a start is a deeper start
        assert bool(deeper.starts[level.starts].all())


@EXAMPLES
@given(rows=batches(max_steps=7, n_anchors=3), depth=st.integers(0, 5))
def test_int32_keys_give_the_int64_order_and_levels(rows, depth):
    """Below ``INT32_KEYS`` the keys are built and sorted as int32, for speed only: the order and every level
    must be what the int64 keys give."""
    prep = prepared(rows)
    width = len({r.anchor for r in rows}) + 1
    assert prep.n_groups * width ** (depth + 1) < history_groups.INT32_KEYS  # a few groups, small widths
    got_order, got = history_levels(prep, depth)
    saved = history_groups.INT32_KEYS
    history_groups.INT32_KEYS = 0  # every key is "too large": int64
    try:
        want_order, want = history_levels(prep, depth)
    finally:
        history_groups.INT32_KEYS = saved
    assert torch.equal(got_order, want_order)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.starts, b.starts) and torch.equal(a.defined, b.defined)
        assert a.groups == b.groups


def test_a_history_too_deep_for_int64_takes_the_per_level_path_and_matches_the_oracle():
    """60 distinct anchors and K = 12: 61 ** 13 > 2 ** 62, so the levels are packed one by one."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for traj in range(24):
        walk = torch.randint(0, 60, (14,), generator=gen).tolist()
        for step in range(14):
            rows.append(
                Row(
                    traj // 6,
                    traj,
                    step,
                    float(step == 13) * (traj % 2),
                    walk[step] % (8 + traj % 3 * 26),
                    False,
                )
            )
    assert len({r.anchor for r in rows}) + 1 > 2 ** (62 / 13)
    params = {"history_length": 12, "mode": "mean_norm", "gamma": 0.5}
    got = compute_advantages("hgpo", **columns(rows), **params)
    want = torch.tensor(hgpo(rows, **params), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-6)


@EXAMPLES
@given(
    rows=batches(max_steps=7, n_anchors=3), depth=st.integers(0, 5), select_below=st.sampled_from([0.0, 2.0])
)
def test_level_segments_keep_the_defined_rows_in_groups_of_two_or_more(rows, depth, select_below):
    """Per level, the rows that ``level_segments`` keeps (selected, or masked) are those with t >= k whose
    level-k tuple (the oracle's) is shared by another row, and their ids group them by that tuple."""
    prep = prepared(rows)
    order, levels = history_levels(prep, depth)
    saved = history_groups.SELECT_BELOW
    history_groups.SELECT_BELOW = select_below  # 0: never select (masks); 2: always select
    try:
        segments = list(level_segments(levels))
    finally:
        history_groups.SELECT_BELOW = saved
    for k, seg in enumerate(segments):
        want = oracle_partition(rows, k)
        shared = {key for key in want if key is not None and want.count(key) >= 2}
        at = order if seg.rows is None else order.index_select(0, seg.rows)  # batch rows of the M rows
        kept = torch.ones(at.numel(), dtype=torch.bool) if seg.kept is None else seg.kept
        assert (seg.rows is None) == (select_below == 0.0)
        got = sorted(int(i) for i in at[kept])
        assert got == sorted(i for i, key in enumerate(want) if key in shared)
        assert same_partition(seg.ids[kept].tolist(), [want[int(i)] for i in at[kept]])
        assert seg.num == (int(seg.ids.max()) + 1 if seg.ids.numel() else 0)


@EXAMPLES
@given(
    rows=batches(max_steps=7, n_anchors=3),
    depth=st.integers(0, 5),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
    population_std=st.booleans(),
    episode_level=st.sampled_from(["none", "weighted", "add"]),
)
def test_selecting_or_masking_a_levels_rows_gives_the_same_bits(
    rows, depth, mode, population_std, episode_level
):
    """``SELECT_BELOW`` is a speed choice only: hgpo with every level masked, every level reduced to its kept
    rows, and the mixes in between (a level masked within an earlier level's selection) returns the same
    floats (a group's sums see the same rows in the same order)."""
    params = {
        "history_length": depth,
        "mode": mode,
        "population_std": population_std,
        "episode_level": episode_level,
        "gamma": 0.95,
    }
    results = []
    saved = history_groups.SELECT_BELOW
    for select_below in (0.0, 0.5, 0.75, 0.9, 2.0):
        history_groups.SELECT_BELOW = select_below
        try:
            results.append(compute_advantages("hgpo", **columns(rows), **params))
        finally:
            history_groups.SELECT_BELOW = saved
    for other in results[1:]:
        assert torch.equal(results[0], other)


def test_a_level_masked_within_an_earlier_selection_gives_the_same_bits():
    """The mixed path, which small random batches rarely reach: level 0 keeps 10 of 21 rows (ten singleton
    starts and one more), so it selects; level 1 keeps 6 of those 10, so at ``SELECT_BELOW = 0.55`` it masks
    within level 0's selection. Same floats as never and always selecting."""
    rows = [Row(0, 100 + i, 0, 0.5 * i, i, False) for i in range(10)]  # ten singletons at level 0
    for traj, path in enumerate([[20, 21, 22], [20, 21, 22], [20, 21, 22], [23, 21]]):
        rows += [Row(0, traj, t, float(traj + t * t), s, traj == 1) for t, s in enumerate(path)]
    prep = prepared(rows)
    order, levels = history_levels(prep, 1)
    saved = history_groups.SELECT_BELOW
    results = []
    try:
        history_groups.SELECT_BELOW = 0.55
        level0, level1 = level_segments(levels)
        assert level0.rows is not None and level0.kept is None and level0.rows.numel() == 10
        assert level1.rows is not None and level1.kept is not None and int(level1.kept.sum()) == 6
        for select_below in (0.55, 0.0, 2.0):
            history_groups.SELECT_BELOW = select_below
            for mode in ("mean_norm", "mean_std_norm"):
                results.append(compute_advantages("hgpo", **columns(rows), history_length=1, mode=mode))
    finally:
        history_groups.SELECT_BELOW = saved
    assert bool((results[0] != 0).any())
    for i in range(2, len(results)):
        assert torch.equal(results[i], results[i % 2])
