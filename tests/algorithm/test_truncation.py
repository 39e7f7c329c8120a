"""gigpo's ``bootstrap_truncated``: why it exists (the time-limit bias of G_t), what it changes and what not.

The oracle comparison on random batches is in test_oracle.py; here are the hand-computed case and the
invariants that make the option safe to turn on.
"""

from __future__ import annotations

import pytest
import torch
from advantage_oracle import Row, batches, columns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm import compute_advantages
from gigpo_lab.algorithm.prepare import MissingColumnError

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _late_and_early_visit(reward: float) -> list[Row]:
    """One group: A and B both cut after 4 steps, every step paying ``reward``; they share state 0, which
    A visits at t=0 and B at t=2. Every other state is a singleton step group."""
    anchors = {0: [0, 1, 2, 3], 1: [4, 5, 0, 6]}
    return [
        Row(group=0, traj=j, step=t, reward=reward, anchor=a, invalid=False, truncated=t == 3)
        for j, path in anchors.items()
        for t, a in enumerate(path)
    ]


def test_without_the_bootstrap_a_late_visit_beats_an_early_one_in_a_cut_episode():
    """Hand-computed, gamma 0.95, every step -1: A's G_0 = -(1 - 0.95^4) / 0.05 = -3.709875 and B's
    G_2 = -(1 - 0.95^2) / 0.05 = -1.95, so the same state and equally good play get -/+0.8799375; with the
    bootstrap both are -1 / 0.05 = -20 and the step group is flat."""
    rows = _late_and_early_visit(-1.0)
    params = {
        "step_advantage_weight": 1.0,
        "gamma": 0.95,
        "step_singleton": "zero",
        "invalid_action_penalty": 0,
    }
    plain = compute_advantages("gigpo", **columns(rows), **params)
    want = torch.zeros(8, dtype=torch.float64)
    want[0], want[6] = -0.8799375, 0.8799375
    torch.testing.assert_close(plain, want, rtol=0, atol=1e-12)
    boot = compute_advantages("gigpo", **columns(rows), **params, bootstrap_truncated=True)
    torch.testing.assert_close(boot, torch.zeros(8, dtype=torch.float64), rtol=0, atol=1e-12)


@SETTINGS
@given(
    reward=st.one_of(st.sampled_from([-1.0, 0.5]), st.floats(-10.0, 10.0)),
    gamma=st.floats(0.0, 0.99),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
    data=st.data(),
)
def test_a_constant_reward_in_cut_episodes_gives_no_step_advantage(reward, gamma, mode, data):
    """Every row of every trajectory cut and paying the same reward: G_t = reward / (1 - gamma) wherever
    and whenever a state is visited, so the step-level part is 0 up to rounding."""
    rows = data.draw(batches(), label="rows")
    rows = [
        Row(r.group, r.traj, r.step, reward, r.anchor, r.invalid, r.text, truncated=r.step == last)
        for r in rows
        for last in [max(q.step for q in rows if q.traj == r.traj)]
    ]
    params = {"gamma": gamma, "mode": mode, "invalid_action_penalty": 0.0, "step_singleton": "zero"}
    with_step = compute_advantages("gigpo", **columns(rows), **params, bootstrap_truncated=True)
    episode = compute_advantages("gigpo", **columns(rows), **params, step_advantage_weight=0.0)
    # mean_std_norm divides a rounding-level spread by (std + 1e-6), hence the looser bound there
    atol = 1e-9 if mode == "mean_norm" else 1e-3
    torch.testing.assert_close(with_step, episode, rtol=0, atol=atol)


@SETTINGS
@given(rows=batches(), gamma=st.floats(0.0, 0.99), zero_rewards=st.booleans())
def test_nothing_changes_bit_for_bit_without_a_cut_episode_or_a_reward(rows, gamma, zero_rewards):
    """With no cut trajectory, or with every reward 0 (FrozenLake's cut episodes), the option is a no-op."""
    if zero_rewards:
        rows = [Row(r.group, r.traj, r.step, 0.0, r.anchor, r.invalid, r.text, r.truncated) for r in rows]
    else:
        rows = [Row(r.group, r.traj, r.step, r.reward, r.anchor, r.invalid, r.text, False) for r in rows]
    off = compute_advantages("gigpo", **columns(rows), gamma=gamma)
    on = compute_advantages("gigpo", **columns(rows), gamma=gamma, bootstrap_truncated=True)
    assert torch.equal(on, off)


def test_bad_settings_name_the_fix():
    rows = _late_and_early_visit(-1.0)
    with pytest.raises(ValueError, match="bootstrap_truncated needs gamma < 1.*estimator.gamma"):
        compute_advantages("gigpo", **columns(rows), gamma=1.0, bootstrap_truncated=True)
    with pytest.raises(TypeError, match="bootstrap_truncated must be true or false"):
        compute_advantages("gigpo", **columns(rows), bootstrap_truncated="yes")
    cols = {k: v for k, v in columns(rows).items() if k != "truncated"}
    with pytest.raises(MissingColumnError, match="'truncated' \\(the collector"):
        compute_advantages("gigpo", **cols, bootstrap_truncated=True)
    bad = {**columns(rows), "truncated": torch.full((8,), 2)}
    with pytest.raises(ValueError, match="truncated must be bool or 0/1"):
        compute_advantages("gigpo", **bad, bootstrap_truncated=True)
