"""Turn-level GAE against a loop written from Schulman et al. 2016 (eq. 16), and its two limits."""

from __future__ import annotations

import pytest
import torch
from advantage_oracle import batches, columns, discounted_returns, turn_gae
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm import gae
from gigpo_lab.algorithm.returns import trajectory_layout

_unit = st.sampled_from([0.0, 0.5, 0.9, 0.95, 1.0])


def _run(rows, values, gamma, lam):
    cols = columns(rows)
    traj = torch.unique(cols["traj_ids"], return_inverse=True)[1]
    n_traj = int(traj.max()) + 1
    layout = trajectory_layout(traj, cols["step_ids"], n_traj, cols["traj_ids"])
    v = torch.tensor([values[(r.traj, r.step)] for r in rows], dtype=torch.float64)
    return gae.turn_gae(cols["rewards"], v, traj, layout, gamma, lam)


def _values(rows, draw_values):
    return {(r.traj, r.step): v for r, v in zip(rows, draw_values, strict=False)}


@given(rows=batches(), data=st.data(), gamma=_unit, lam=_unit)
@settings(max_examples=150, deadline=None)
def test_gae_matches_the_sum_over_td_errors(rows, data, gamma, lam):
    vs = data.draw(st.lists(st.floats(-5, 5), min_size=len(rows), max_size=len(rows)))
    values = _values(rows, vs)
    adv, ret = _run(rows, values, gamma, lam)
    want = turn_gae(rows, values, gamma, lam)
    for i, r in enumerate(rows):
        assert float(adv[i]) == pytest.approx(want[(r.traj, r.step)][0], rel=1e-9, abs=1e-9)
        assert float(ret[i]) == pytest.approx(want[(r.traj, r.step)][1], rel=1e-9, abs=1e-9)


@given(rows=batches(), gamma=_unit)
@settings(max_examples=80, deadline=None)
def test_lambda_one_with_a_zero_critic_is_the_discounted_return(rows, gamma):
    adv, ret = _run(rows, {(r.traj, r.step): 0.0 for r in rows}, gamma, 1.0)
    want = discounted_returns(rows, gamma)
    for i, r in enumerate(rows):
        assert float(adv[i]) == pytest.approx(want[(r.traj, r.step)], rel=1e-9, abs=1e-9)
    assert torch.equal(adv, ret)


@given(rows=batches(), data=st.data(), gamma=_unit)
@settings(max_examples=80, deadline=None)
def test_lambda_zero_is_the_td_error(rows, data, gamma):
    vs = data.draw(st.lists(st.floats(-5, 5), min_size=len(rows), max_size=len(rows)))
    values = _values(rows, vs)
    adv, _ = _run(rows, values, gamma, 0.0)
    for i, r in enumerate(rows):
        nxt = values.get((r.traj, r.step + 1), 0.0)
        assert float(adv[i]) == pytest.approx(r.reward + gamma * nxt - values[(r.traj, r.step)], abs=1e-9)


@given(rows=batches(), data=st.data(), gamma=_unit, lam=_unit)
@settings(max_examples=60, deadline=None)
def test_permuting_the_rows_permutes_the_output(rows, data, gamma, lam):
    vs = data.draw(st.lists(st.floats(-5, 5), min_size=len(rows), max_size=len(rows)))
    values = _values(rows, vs)
    order = data.draw(st.permutations(range(len(rows))))
    adv, ret = _run(rows, values, gamma, lam)
    adv_p, ret_p = _run([rows[i] for i in order], values, gamma, lam)
    assert torch.equal(adv_p, adv[list(order)]) and torch.equal(ret_p, ret[list(order)])
