"""The two group filters against their definitions, written as loops over groups (DAPO, StarPO-S)."""

from __future__ import annotations

import statistics

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm.group_filter import episode_returns, group_return_std, keep_nonconstant, keep_top_std

_returns = st.sampled_from([0.0, 1.0, 0.1, -1.0, 10.0, 0.30000000000000004])


@st.composite
def groups(draw):
    """Groups of episodes, each episode a list of step rewards; returns (rewards, traj, group_of_traj)."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=8))
    rewards, traj, group_of_traj = [], [], []
    j = 0
    for g, size in enumerate(sizes):
        for _ in range(size):
            steps = draw(st.lists(_returns, min_size=1, max_size=4))
            rewards += steps
            traj += [j] * len(steps)
            group_of_traj.append(g)
            j += 1
    return torch.tensor(rewards, dtype=torch.float64), torch.tensor(traj), torch.tensor(group_of_traj)


def _oracle_returns(rewards, traj, group_of_traj):
    per_traj = {}
    for r, j in zip(rewards.tolist(), traj.tolist(), strict=True):
        per_traj[j] = per_traj.get(j, 0.0) + r
    by_group = {}
    for j, g in enumerate(group_of_traj.tolist()):
        by_group.setdefault(g, []).append(per_traj[j])
    return by_group


@given(batch=groups())
@settings(max_examples=150, deadline=None)
def test_nonconstant_drops_exactly_the_groups_whose_returns_are_all_equal(batch):
    rewards, traj, group_of_traj = batch
    n_groups = int(group_of_traj.max()) + 1
    returns = episode_returns(rewards, traj, len(group_of_traj))
    keep = keep_nonconstant(returns, group_of_traj, n_groups)
    by_group = _oracle_returns(rewards, traj, group_of_traj)
    assert keep.tolist() == [len(by_group[g]) == 1 or len(set(by_group[g])) > 1 for g in range(n_groups)]


@given(batch=groups(), share=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]))
@settings(max_examples=150, deadline=None)
def test_top_std_keeps_the_int_share_groups_of_largest_std(batch, share):
    rewards, traj, group_of_traj = batch
    n_groups = int(group_of_traj.max()) + 1
    std = group_return_std(episode_returns(rewards, traj, len(group_of_traj)), group_of_traj, n_groups)
    by_group = _oracle_returns(rewards, traj, group_of_traj)
    want_std = [statistics.stdev(by_group[g]) if len(by_group[g]) > 1 else 0.0 for g in range(n_groups)]
    assert torch.allclose(std, torch.tensor(want_std, dtype=torch.float64), atol=1e-12)
    keep = keep_top_std(std, share)
    ranked = sorted(range(n_groups), key=lambda g: (-float(std[g]), g))
    assert keep.tolist() == [g in ranked[: int(share * n_groups)] for g in range(n_groups)]


def test_the_worked_example_of_the_module_docstring():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 3.0], dtype=torch.float64)
    traj, group_of_traj = torch.arange(6), torch.tensor([0, 0, 1, 1, 2, 2])
    returns = episode_returns(rewards, traj, 6)
    assert keep_nonconstant(returns, group_of_traj, 3).tolist() == [False, True, True]
    std = group_return_std(returns, group_of_traj, 3)
    assert [round(float(s), 2) for s in std] == [0.0, 0.71, 2.12]
    assert keep_top_std(std, 0.5).tolist() == [False, False, True]
