"""Properties every estimator must keep, on random batches (Hypothesis), and the return scan's stability."""

from __future__ import annotations

import math

import pytest
import torch
from advantage_oracle import Row, batches, columns
from hypothesis import given
from hypothesis import strategies as st
from property_examples import examples

from gigpo_lab.algorithm import (
    available_estimators,
    build_estimator,
    compute_advantages,
    discounted_returns,
    group_normalize,
)
from gigpo_lab.algorithm.returns import trajectory_layout
from gigpo_lab.batch import StepBatch

SETTINGS = examples(70, 400)
_mode = st.sampled_from(["mean_norm", "mean_std_norm"])
_over = st.sampled_from(["rows", "trajectories"])
_singleton = st.sampled_from(["raw", "zero"])


def params_for(name: str, mode: str) -> dict:
    return {"mode": mode} if name in ("grpo", "gigpo") else {}


#: Rewards on a grid of 1/8 in [-10, 10]. With any float, two returns can differ by less than float32 resolves
#: (5.0 against 5.0000001), and mean_std_norm divides that difference by a std of the same size plus eps = 1e-6,
#: so float32 cannot agree with float64 there; on the grid, distinct returns differ by far more than float32's
#: rounding.
_grid_reward = st.integers(-80, 80).map(lambda k: k / 8)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_pp", "gigpo", "gigpo_step_index"])
@SETTINGS
@given(rows=batches(rewards=_grid_reward), mode=_mode, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_finite_output_in_the_input_dtype(name, rows, mode, dtype):
    adv = compute_advantages(name, **columns(rows, dtype), **params_for(name, mode))
    assert adv.dtype == dtype and adv.shape == (len(rows),)
    assert bool(torch.isfinite(adv).all())
    ref = compute_advantages(name, **columns(rows), **params_for(name, mode))
    torch.testing.assert_close(adv.double(), ref, rtol=1e-5, atol=1e-3)  # float32 agrees with float64


#: The estimators whose advantages are relative to a group (all but ppo, whose baseline is its critic).
GROUP_RELATIVE = [n for n in available_estimators() if "values" not in build_estimator(n).requires]


@pytest.mark.parametrize("name", GROUP_RELATIVE)
@pytest.mark.parametrize("reward", [0.0, 3.0])
def test_a_single_row_is_finite_and_constant_groups_are_exactly_zero(name, reward):
    one = [Row(group=1, traj=2, step=0, reward=reward, anchor=0, invalid=False)]
    assert bool(torch.isfinite(compute_advantages(name, **columns(one))).all())
    # Three equal trajectories of 2 steps: equal returns and equal step returns per anchor.
    same = [
        Row(group=1, traj=j, step=t, reward=reward, anchor=t, invalid=False)
        for j in range(3)
        for t in range(2)
    ]
    for mode in ("mean_norm", "mean_std_norm"):
        adv = compute_advantages(name, **columns(same), **params_for(name, mode))
        assert bool(torch.isfinite(adv).all())
        assert torch.count_nonzero(adv) == 0, (
            "a constant group has exactly zero advantage (no rounding noise)"
        )


@SETTINGS
@given(
    rows=batches(),
    mode=_mode,
    over=_over,
    episode_singleton=_singleton,
    step_singleton=_singleton,
    gamma=st.floats(0.0, 1.0),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_grpo_is_gigpo_at_zero_weight_bit_for_bit(
    rows, mode, over, episode_singleton, step_singleton, gamma, dtype
):
    common = {"mode": mode, "normalize_over": over, "episode_singleton": episode_singleton}
    grpo = compute_advantages("grpo", **columns(rows, dtype), **common)
    gigpo = compute_advantages(
        "gigpo",
        **columns(rows, dtype),
        **common,
        step_advantage_weight=0.0,
        gamma=gamma,
        step_singleton=step_singleton,
    )
    assert torch.equal(grpo, gigpo)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_pp", "gigpo", "gigpo_step_index"])
@SETTINGS
@given(rows=batches(), mode=_mode, data=st.data())
def test_permuting_rows_permutes_the_output(name, rows, mode, data):
    perm = data.draw(st.permutations(range(len(rows))), label="perm")
    adv = compute_advantages(name, **columns(rows), **params_for(name, mode))
    shuffled = compute_advantages(name, **columns([rows[i] for i in perm]), **params_for(name, mode))
    torch.testing.assert_close(shuffled, adv[perm], rtol=1e-9, atol=1e-8)


def _group_sums(values: torch.Tensor, keys: list) -> dict:
    sums: dict = {}
    for k, v in zip(keys, values.tolist(), strict=True):
        sums[k] = sums.get(k, 0.0) + v
    return sums


@SETTINGS
@given(rows=batches(), penalty=st.sampled_from([0.0, 0.1]))
def test_mean_norm_episode_advantages_sum_to_zero_per_group(rows, penalty):
    """Rows mode: over every row of a group. Trajectories mode (no penalty): over one row per trajectory."""
    rows_adv = compute_advantages(
        "grpo", **columns(rows), invalid_action_penalty=penalty, episode_singleton="zero"
    )
    for g, total in _group_sums(rows_adv, [r.group for r in rows]).items():
        assert abs(total) < 1e-9, g
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(r.traj, i)
    idx = list(first.values())
    traj_adv = compute_advantages(
        "grpo",
        **columns(rows),
        normalize_over="trajectories",
        invalid_action_penalty=0.0,
        episode_singleton="zero",
    )
    for g, total in _group_sums(traj_adv[idx], [rows[i].group for i in idx]).items():
        assert abs(total) < 1e-9, g


@SETTINGS
@given(rows=batches(), gamma=st.floats(0.0, 1.0))
def test_mean_norm_step_advantages_sum_to_zero_per_step_group(rows, gamma):
    kw = {"gamma": gamma, "step_singleton": "zero"}
    step = compute_advantages("gigpo", **columns(rows), **kw) - compute_advantages("grpo", **columns(rows))
    for key, total in _group_sums(step, [(r.group, r.anchor) for r in rows]).items():
        assert abs(total) < 1e-8, key


@pytest.mark.parametrize("name", available_estimators())
def test_object_api_matches_the_function(name):
    rows = [
        Row(group=j % 2, traj=j, step=t, reward=float(j * t % 3), anchor=t % 2, invalid=t == 1)
        for j in range(4)
        for t in range(3)
    ]
    cols = columns(rows)
    out = build_estimator(name)(StepBatch(**{k: v for k, v in cols.items() if k != "anchor_texts"}))
    assert torch.equal(out.advantages, compute_advantages(name, **cols))
    assert set(out.metrics) >= {"adv/mean", "adv/std"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())


# --- the discounted-return scan -----------------------------------------------------------------------------


def _loop_returns(rewards: list[float], gamma: float) -> list[float]:
    out, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        out.append(g)
    return out[::-1]


@pytest.mark.parametrize("gamma", [0.0, 1e-300, 1e-3, 0.01, 0.5, 0.95, 0.999, 1.0])
@pytest.mark.parametrize("length", [1, 2, 3, 50, 200, 1000])
def test_discounted_returns_are_stable_for_long_trajectories(gamma, length):
    """Exact agreement with the backwards loop at any length and gamma (no gamma^-t overflow)."""
    gen = torch.Generator().manual_seed(length)
    lengths = [length, 7, 1, length // 2 + 1]
    rewards = [torch.randn(n, generator=gen, dtype=torch.float64) for n in lengths]
    traj = torch.cat([torch.full((n,), j) for j, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    perm = torch.randperm(traj.numel(), generator=gen)
    layout = trajectory_layout(traj[perm], step[perm], len(lengths), traj[perm])
    got = discounted_returns(torch.cat(rewards)[perm], traj[perm], layout, gamma)
    want = torch.tensor(sum((_loop_returns(r.tolist(), gamma) for r in rewards), []), dtype=torch.float64)[
        perm
    ]
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)


@SETTINGS
@given(
    value=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=4),
    mode=_mode,
)
def test_group_normalize_gives_exact_zeros_on_constant_groups(value, sizes, mode):
    """The corrected two-pass mean lands exactly on a constant group's value, whatever its size."""
    segment = torch.cat([torch.full((n,), k) for k, n in enumerate(sizes)])
    values = torch.full((segment.numel(),), value, dtype=torch.float64)
    out = group_normalize(values, segment, len(sizes), mode=mode, eps=1e-6, singleton="zero")
    assert torch.count_nonzero(out) == 0
