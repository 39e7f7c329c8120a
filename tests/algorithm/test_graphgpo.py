"""graphgpo against its loop oracle (tests/graphgpo_oracle.py, written from issue #50's six points), the properties
the issue names (no success: A^S = 0; on a chain d falls by one per step; row permutation; step weight 0 is the
episode level), the vectorised breadth-first search against a queue, the worked example of docs/ALGORITHMS.md
and the refusals."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
from advantage_oracle import Row, batches, columns
from graphgpo_oracle import goal_distance, graphgpo, reverse_bfs, step_returns
from hypothesis import given
from hypothesis import strategies as st
from property_examples import examples

from gigpo_lab.algorithm import MissingColumnError, build_estimator, check_requirements, compute_advantages
from gigpo_lab.algorithm.transition_graph import UNREACHABLE, goal_distances

EXAMPLES = examples(70, 400)
#: The invariants (a relation between two runs of the estimator) at fewer examples than the oracle's.
INVARIANTS = examples(50, 200)
_gamma = st.one_of(st.sampled_from([0.0, 0.1, 0.5, 1.0]), st.floats(0.0, 1.0))
PARAMS = st.fixed_dictionaries(
    {
        "step_advantage_weight": st.sampled_from([0.0, 0.5, 1.0]),
        "episode_advantage_weight": st.sampled_from([0.0, 1.0]),
        "gamma": _gamma,
        "normalize_distance": st.booleans(),
        "goal_return": st.sampled_from([1.0, 10.0]),
        "unreachable_return": st.sampled_from([0.0, -1.0]),
        "success_on": st.sampled_from(["terminated_positive", "terminated"]),
        "cut_end": st.sampled_from(["dead_end", "stay"]),
        "count_transitions": st.sampled_from(["rows", "edges"]),
        "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
        "normalize_over": st.sampled_from(["rows", "trajectories"]),
        "invalid_action_penalty": st.sampled_from([0.0, 0.1, 1.0]),
        "episode_singleton": st.sampled_from(["raw", "zero"]),
        "step_singleton": st.sampled_from(["raw", "zero"]),
    }
)
#: A^S alone, in reward units, a singleton step group showing its own return: the readout of the step returns.
STEP_RETURNS = {"episode_advantage_weight": 0.0, "mode": "mean_norm", "step_singleton": "raw"}


def assert_matches(rows, params):
    got = compute_advantages("graphgpo", **columns(rows), **params)
    want = torch.tensor(graphgpo(rows, **params), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-6, msg=lambda m: f"{params}\n{rows}\n{m}")


@EXAMPLES
@given(rows=batches(n_anchors=3, max_steps=6), params=PARAMS)
def test_matches_the_oracle(rows, params):
    assert_matches(rows, params)


@INVARIANTS
@given(rows=batches(max_steps=4), params=PARAMS, threshold=st.sampled_from([0.5, 0.9, 0.95]))
def test_similarity_merging_matches_the_oracle(rows, params, threshold):
    assert_matches(rows, {**params, "anchor_similarity_threshold": threshold})


@INVARIANTS
@given(rows=batches(n_anchors=3, max_steps=6), params=PARAMS, data=st.data())
def test_a_group_without_success_gets_no_step_advantage(rows, params, data):
    """No success in a group: every state is infinitely far, every step return is unreachable_return, so A^S = 0
    (without invalid rows: an invalid row still pays its penalty, as in GiGPO; and with the default
    step_singleton zero: a raw singleton shows its return, unreachable_return)."""
    groups = sorted({r.group for r in rows})
    failed = set(data.draw(st.lists(st.sampled_from(groups), min_size=1, unique=True), label="failed"))
    rows = [
        Row(
            r.group,
            r.traj,
            r.step,
            -abs(r.reward) if r.group in failed else r.reward,
            r.anchor,
            False,
            r.text,
            r.truncated,
        )
        for r in rows
    ]
    params = {**params, "success_on": "terminated_positive", "step_singleton": "zero"}
    step = compute_advantages("graphgpo", **columns(rows), **{**params, "episode_advantage_weight": 0.0})
    assert all(float(step[i]) == 0.0 for i, r in enumerate(rows) if r.group in failed)


@EXAMPLES
@given(
    length=st.integers(1, 12),
    prefixes=st.lists(st.integers(1, 12), max_size=3),
    gamma=st.floats(0.01, 1.0),
    data=st.data(),
)
def test_on_a_chain_the_distance_falls_by_one_per_step(length, prefixes, gamma, data):
    """One successful trajectory through distinct states s0 .. s_{T-1}, plus failed walks along prefixes of it:
    d(s_t) = T - t, so the step return of t is 10 gamma^(T - 1 - t), and with normalize_distance every step
    closes one unit: 10 gamma^0."""
    rows = [Row(0, 0, t, 10.0 * (t == length - 1), t, False) for t in range(length)]
    for j, n in enumerate(prefixes, start=1):
        rows += [Row(0, j, t, 0.0, t, False, truncated=t == n - 1) for t in range(min(n, length))]
    d = goal_distance(rows)
    assert [d[(0, t)] for t in range(length)] == [length - t for t in range(length)]
    chain = rows[:length]  # alone: every step group a singleton, so the raw readout is the return
    got = compute_advantages("graphgpo", **columns(chain), **STEP_RETURNS, gamma=gamma)
    torch.testing.assert_close(got, torch.tensor([10.0 * gamma ** (length - 1 - t) for t in range(length)],
                                                 dtype=torch.float64), rtol=1e-12, atol=0)  # fmt: skip
    progress = compute_advantages(
        "graphgpo", **columns(chain), **STEP_RETURNS, gamma=gamma, normalize_distance=True
    )
    assert torch.equal(progress, torch.full((length,), 10.0, dtype=torch.float64))
    perm = data.draw(st.permutations(range(len(rows))), label="perm")
    shuffled = [rows[i] for i in perm]
    assert [goal_distance(shuffled)[(r.traj, r.step)] for r in shuffled] == [
        d[(r.traj, r.step)] for r in shuffled
    ]


@INVARIANTS
@given(rows=batches(n_anchors=3, max_steps=6), params=PARAMS, data=st.data())
def test_permuting_the_rows_permutes_the_output(rows, params, data):
    perm = data.draw(st.permutations(range(len(rows))), label="perm")
    base = compute_advantages("graphgpo", **columns(rows), **params)
    shuffled = compute_advantages("graphgpo", **columns([rows[i] for i in perm]), **params)
    torch.testing.assert_close(shuffled, base[list(perm)], rtol=1e-9, atol=1e-8)


@INVARIANTS
@given(rows=batches(), params=PARAMS)
def test_step_weight_zero_is_the_episode_level_bit_for_bit(rows, params):
    episode = {
        k: params[k] for k in ("mode", "normalize_over", "invalid_action_penalty", "episode_singleton")
    }
    got = compute_advantages("graphgpo", **columns(rows), **{**params, "step_advantage_weight": 0.0})
    want = params["episode_advantage_weight"] * compute_advantages("grpo", **columns(rows), **episode)
    assert torch.equal(got, want)


@examples(300, 1500)
@given(
    n_nodes=st.integers(1, 30),
    edges=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=80),
    goals=st.lists(st.integers(0, 29), min_size=1, max_size=3, unique=True),
)
def test_the_vectorised_search_equals_a_queue(n_nodes, edges, goals):
    edges = [(a % n_nodes, b % n_nodes) for a, b in edges if a % n_nodes != b % n_nodes]
    goals = sorted({g % n_nodes for g in goals})
    into = defaultdict(list)
    for a, b in edges:
        into[b].append(a)
    want = reverse_bfs(into, goals)
    src = torch.tensor([a for a, _ in edges], dtype=torch.int64)
    dst = torch.tensor([b for _, b in edges], dtype=torch.int64)
    d, levels = goal_distances(src, dst, torch.tensor(goals), n_nodes)
    assert d.tolist() == [want.get(v, UNREACHABLE) for v in range(n_nodes)]
    assert levels == max(want.values())


#: The worked example of docs/ALGORITHMS.md (sections 1 and 10): A s0 s1 s2 -> goal; B s0 s1 s1 s3, invalid at
#: step 1, fails; C s0 s2 -> goal.
WORKED = [
    Row(0, 0, 0, 0.0, 0, False), Row(0, 0, 1, 0.0, 1, False), Row(0, 0, 2, 10.0, 2, False),
    Row(0, 1, 0, 0.0, 0, False), Row(0, 1, 1, 0.0, 1, True), Row(0, 1, 2, 0.0, 1, False),
    Row(0, 1, 3, 0.0, 3, False), Row(0, 2, 0, 0.0, 0, False), Row(0, 2, 1, 10.0, 2, False),
]  # fmt: skip


def test_the_worked_example_of_the_doc():
    """docs/ALGORITHMS.md, "GraphGPO": distances s0 2, s1 2, s2 1, s3 inf; step returns G - p (gamma = 0.1):
    A 0.1 1 10, B 0.1 0 0 0, C 1 10; with normalize_distance A 1 10 10, B 1 0.9 0 0, C 10 10; and the module's
    A^S (mean_norm) in s0 is -0.3, -0.3, 0.6 (A0, B0, C0): A0 and B0 took the same step."""
    d = goal_distance(WORKED)
    assert [d[(r.traj, r.step)] for r in WORKED] == [2, 2, 1, 2, 2, 2, math.inf, 2, 1]
    for normalize, want in (
        (False, [0.1, 1, 10, 0.1, 0, 0, 0, 1, 10]),
        (True, [1, 10, 10, 1, 0.9, 0, 0, 10, 10]),
    ):
        _, _, plain = step_returns(WORKED, normalize_distance=normalize)
        got = [plain[(r.traj, r.step)] - 0.1 * r.invalid for r in WORKED]
        assert got == pytest.approx(want, abs=1e-12)
    step = compute_advantages("graphgpo", **columns(WORKED), episode_advantage_weight=0.0, mode="mean_norm")
    torch.testing.assert_close(
        step, torch.tensor([-0.3, 2 / 3, 0, -0.3, -1 / 3, -1 / 3, 0, 0.6, 0], dtype=torch.float64)
    )


def test_refusals_name_the_parameter_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"success_on='won' is not valid; expected one of"):
        build_estimator("graphgpo", success_on="won")
    with pytest.raises(ValueError, match="gamma"):
        build_estimator("graphgpo", gamma=1.5)
    with pytest.raises(ValueError, match="goal_return"):
        build_estimator("graphgpo", goal_return=0.0)
    with pytest.raises(MissingColumnError, match="anchor_texts"):
        check_requirements("graphgpo", ["rewards", "group_ids", "traj_ids", "step_ids", "anchor_ids"],
                           anchor_similarity_threshold=0.95)  # fmt: skip
    assert "truncated" in build_estimator("graphgpo").optional
