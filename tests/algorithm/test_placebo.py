"""The placebo GiGPO (``estimator.placebo=true``): against an oracle written from its definition, and the
properties that make it a placebo: each episode group keeps its step-group sizes, the anchors do not enter
the result, every partition with those sizes is equally likely, and at omega = 0 it is GiGPO's episode level.

The oracle (``placebo_oracle``) takes the random keys as given (``placebo_keys``, the draw) and builds the
partition with loops: per episode group, the anchor-group sizes largest first, the rows in key order, the
first s1 rows one group, the next s2 the second, ...; then it runs the gigpo loop oracle on those groups.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import replace

import pytest
import torch
from advantage_oracle import ORACLES, batches, columns
from hypothesis import given
from hypothesis import strategies as st
from property_examples import examples
from test_oracle import PARAMS

from gigpo_lab.algorithm import compute_advantages
from gigpo_lab.algorithm.grouping import dense_ids
from gigpo_lab.algorithm.placebo import placebo_keys, shuffle_step_groups

EXAMPLES = examples(100, 600)
SEEDS = st.integers(min_value=-(2**40), max_value=2**40)


def keys_of(rows, seed: int) -> dict[tuple[int, int], float]:
    """{(traj, step): key}: the implementation's draw for ``rows``, the one input the oracle borrows."""
    cols = columns(rows)
    keys = placebo_keys(cols["traj_ids"], cols["step_ids"], cols["rewards"], cols["invalid"], seed)
    return {(r.traj, r.step): float(k) for r, k in zip(rows, keys, strict=True)}


def placebo_groups(rows, keys) -> dict[tuple[int, int], tuple[int, int]]:
    """{(traj, step): (group, block)} from the definition, with loops."""
    members = defaultdict(list)
    for r in rows:
        members[r.group].append(r)
    out = {}
    for group, rs in members.items():
        sizes = sorted(Counter(r.anchor for r in rs).values(), reverse=True)
        ordered = iter(sorted(rs, key=lambda r: keys[(r.traj, r.step)]))
        for block, size in enumerate(sizes):
            for r in itertools.islice(ordered, size):
                out[(r.traj, r.step)] = (group, block)
    return out


def placebo_oracle(rows, seed, **params):
    """The gigpo oracle on the rows relabelled by ``placebo_groups`` (an anchor id per block)."""
    groups = placebo_groups(rows, keys_of(rows, seed))
    relabelled = [replace(r, anchor=groups[(r.traj, r.step)][1]) for r in rows]
    return ORACLES["gigpo"](relabelled, **params)


@EXAMPLES
@given(rows=batches(), params=PARAMS["gigpo"], seed=SEEDS)
def test_matches_the_oracle_written_from_the_definition(rows, params, seed):
    got = compute_advantages("gigpo", **columns(rows), **params, placebo=True, placebo_seed=seed)
    want = torch.tensor(placebo_oracle(rows, seed, **params), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-6, msg=lambda m: f"{params}\n{rows}\n{m}")


def step_groups(rows) -> tuple[torch.Tensor, int, torch.Tensor]:
    """The real step groups of ``rows``: (step_group (N,), S, dense episode group (N,))."""
    cols = columns(rows)
    group, _ = dense_ids(cols["group_ids"])
    step_group, n = dense_ids(cols["group_ids"], cols["anchor_ids"])
    return step_group, n, group


def sizes_by_group(step_group: torch.Tensor, group: torch.Tensor) -> dict[int, list[int]]:
    """{episode group: its step-group sizes, sorted}; asserts each step group lies in one episode group."""
    owner = {}
    for s, g in zip(step_group.tolist(), group.tolist(), strict=True):
        assert owner.setdefault(s, g) == g, "a step group spans two episode groups"
    count = Counter(step_group.tolist())
    out = defaultdict(list)
    for s, g in owner.items():
        out[g].append(count[s])
    return {g: sorted(v) for g, v in out.items()}


@EXAMPLES
@given(rows=batches(max_trajs=6, max_steps=6), seed=SEEDS)
def test_each_episode_group_keeps_its_step_group_sizes(rows, seed):
    step_group, n, group = step_groups(rows)
    cols = columns(rows)
    keys = placebo_keys(cols["traj_ids"], cols["step_ids"], cols["rewards"], cols["invalid"], seed)
    shuffled = shuffle_step_groups(step_group, n, group, keys)
    assert sizes_by_group(shuffled, group) == sizes_by_group(step_group, group)
    assert sorted(Counter(shuffled.tolist()).values()) == sorted(Counter(step_group.tolist()).values())


@EXAMPLES
@given(data=st.data(), params=PARAMS["gigpo"], seed=SEEDS)
def test_the_anchors_do_not_enter_the_result(data, params, seed):
    """Two batches that differ only in which rows share an anchor get identical advantages, bit for bit: in
    each episode group the anchors are permuted among the rows and renamed (so every group keeps its sizes,
    and which anchor id has which size changes too)."""
    rows = data.draw(batches(max_trajs=6, max_steps=6), label="rows")
    moved = []
    for group in {r.group for r in rows}:
        members = [i for i, r in enumerate(rows) if r.group == group]
        anchors = data.draw(st.permutations([rows[i].anchor for i in members]), label="anchors")
        palette = sorted(set(anchors))
        rename = dict(zip(palette, data.draw(st.permutations(palette), label="names"), strict=True))
        moved += [(i, rename[a]) for i, a in zip(members, anchors, strict=True)]
    other = list(rows)
    for i, anchor in moved:
        other[i] = replace(rows[i], anchor=anchor)
    run = {**params, "placebo": True, "placebo_seed": seed}
    assert torch.equal(
        compute_advantages("gigpo", **columns(rows), **run),
        compute_advantages("gigpo", **columns(other), **run),
    )


@EXAMPLES
@given(rows=batches(), params=PARAMS["gigpo"], seed=SEEDS)
def test_at_omega_0_it_is_gigpos_episode_level(rows, params, seed):
    run = {**params, "step_advantage_weight": 0.0}
    placebo = compute_advantages("gigpo", **columns(rows), **run, placebo=True, placebo_seed=seed)
    assert torch.equal(placebo, compute_advantages("gigpo", **columns(rows), **run))


@EXAMPLES
@given(rows=batches(), params=PARAMS["gigpo"], seed=SEEDS, data=st.data())
def test_the_row_order_does_not_matter(rows, params, seed, data):
    """A row keeps its key and its advantage wherever it sits in the batch."""
    order = data.draw(st.permutations(range(len(rows))), label="order")
    run = {**params, "placebo": True, "placebo_seed": seed}
    got = compute_advantages("gigpo", **columns([rows[i] for i in order]), **run)
    want = compute_advantages("gigpo", **columns(rows), **run)[torch.tensor(order)]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_every_partition_with_the_sizes_is_equally_likely():
    """One group of 6 rows with anchor groups of sizes 3, 2, 1 (rows 0-2, 3-4, 5): over 3,000 seeds, each of
    the 15 pairs of rows shares a step group about equally often, (3 + 1) / 15 of the time, the pairs that
    share an anchor as often as those that do not."""
    from advantage_oracle import Row

    rows = [
        Row(group=0, traj=t, step=0, reward=float(t), anchor=a, invalid=False)
        for t, a in enumerate([0, 0, 0, 1, 1, 2])
    ]
    together = Counter()
    n_seeds = 3000
    for seed in range(n_seeds):
        groups = placebo_groups(rows, keys_of(rows, seed))
        for a, b in itertools.combinations(range(6), 2):
            together[(a, b)] += groups[(a, 0)] == groups[(b, 0)]
    p = (3 + 1) / 15  # C(3,2) + C(2,2) pairs of 15 share a block, whichever rows
    sd = (p * (1 - p) / n_seeds) ** 0.5
    for pair, k in together.items():
        assert abs(k / n_seeds - p) < 5 * sd, (pair, k / n_seeds, p)


def test_the_draw_depends_on_the_seed_and_the_batch_and_not_the_anchors():
    from advantage_oracle import Row

    rows = [Row(group=0, traj=t, step=0, reward=0.0, anchor=t % 2, invalid=False) for t in range(8)]
    base = keys_of(rows, 0)
    assert keys_of(rows, 0) == base, "deterministic"
    assert keys_of(rows, 1) != base, "another seed, another draw"
    assert keys_of([replace(r, reward=1.0) if r.traj == 3 else r for r in rows], 0) != base
    assert keys_of([replace(r, anchor=0) for r in rows], 0) == base


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_a_placebo_run_of_the_worked_batch_differs_from_gigpo_only_at_the_step_level(mode):
    """A hand check on the doc's worked batch: the placebo keeps GiGPO's diagnostics (the step groups'
    number, mean size and singleton share) and its episode level, and moves the step level."""
    from gigpo_lab.algorithm import build_estimator
    from gigpo_lab.batch import StepBatch

    cols = {
        "rewards": torch.tensor([0.0, 0, 10, 0, 0, 0, 0, 0, 10], dtype=torch.float64),
        "group_ids": torch.zeros(9, dtype=torch.int64),
        "traj_ids": torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2]),
        "step_ids": torch.tensor([0, 1, 2, 0, 1, 2, 3, 0, 1]),
        "anchor_ids": torch.tensor([0, 1, 2, 0, 1, 1, 3, 0, 2]),
        "invalid": torch.tensor([False, False, False, False, True, False, False, False, False]),
    }
    real = build_estimator("gigpo", mode=mode)(StepBatch(**cols))
    placebo = build_estimator("gigpo", mode=mode, placebo=True)(StepBatch(**cols))
    for key in ("adv/step_groups", "adv/step_group_size", "adv/singleton_frac", "adv/episode_mean"):
        assert placebo.metrics[key] == real.metrics[key], key
    assert not torch.equal(placebo.advantages, real.advantages)


def test_placebo_values_are_checked():
    with pytest.raises(TypeError, match="placebo must be true or false"):
        compute_advantages("gigpo", **_one_row(), placebo="yes")
    with pytest.raises(TypeError, match="placebo_seed must be an int"):
        compute_advantages("gigpo", **_one_row(), placebo=True, placebo_seed=1.5)


def _one_row() -> dict:
    return {
        "rewards": torch.tensor([1.0]),
        "group_ids": torch.tensor([0]),
        "traj_ids": torch.tensor([0]),
        "step_ids": torch.tensor([0]),
        "anchor_ids": torch.tensor([0]),
    }
