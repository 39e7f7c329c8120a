"""ppo: the estimator against turn-level GAE and the loop oracle, its properties, and the clipped value loss
against a loop written from verl's ``compute_value_loss`` formula."""

from __future__ import annotations

import pytest
import torch
from advantage_oracle import Row, batches, columns, critic, turn_gae
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm import MissingColumnError, build_estimator, compute_advantages
from gigpo_lab.algorithm.gae import turn_gae as vectorised_gae
from gigpo_lab.algorithm.loss import PolicyLoss, value_loss
from gigpo_lab.algorithm.returns import trajectory_layout
from gigpo_lab.batch import StepBatch

_unit = st.sampled_from([0.0, 0.5, 0.9, 0.95, 1.0])


def _batch(rows, values=None) -> StepBatch:
    cols = {k: v for k, v in columns(rows).items() if k != "anchor_texts"}
    if values is not None:
        cols["values"] = values
    return StepBatch(**cols)


@given(rows=batches(), gamma=_unit, lam=_unit)
@settings(max_examples=150, deadline=None)
def test_without_whitening_or_penalty_it_is_turn_gae_and_its_returns(rows, gamma, lam):
    """End to end on a batch with a given values column: the advantages and the critic's targets are
    ``gae.turn_gae``'s, and the loop oracle's."""
    batch = _batch(rows)
    est = build_estimator("ppo", gamma=gamma, lam=lam, whiten_advantages=False, invalid_action_penalty=0.0)
    out = est(batch)
    traj = torch.unique(batch.traj_ids, return_inverse=True)[1]
    layout = trajectory_layout(traj, batch.step_ids, int(traj.max()) + 1, batch.traj_ids)
    adv, ret = vectorised_gae(batch.rewards, batch.values, traj, layout, gamma, lam)
    assert torch.equal(out.advantages, adv) and torch.equal(out.returns, ret)
    want = turn_gae(rows, {(r.traj, r.step): critic(r) for r in rows}, gamma, lam)
    for i, r in enumerate(rows):
        assert float(out.advantages[i]) == pytest.approx(want[(r.traj, r.step)][0], abs=1e-9)
        assert float(out.returns[i]) == pytest.approx(want[(r.traj, r.step)][1], abs=1e-9)


@given(rows=batches(), gamma=_unit, lam=_unit)
@settings(max_examples=100, deadline=None)
def test_whitening_changes_the_advantages_not_the_targets(rows, gamma, lam):
    raw = build_estimator("ppo", gamma=gamma, lam=lam, whiten_advantages=False)(_batch(rows))
    white = build_estimator("ppo", gamma=gamma, lam=lam)(_batch(rows))
    assert torch.equal(raw.returns, white.returns)
    if len(rows) > 1:
        centred = raw.advantages - raw.advantages.mean()
        want = centred / torch.sqrt(raw.advantages.var() + 1e-8)
        torch.testing.assert_close(white.advantages, want, rtol=1e-12, atol=1e-12)


@given(rows=batches(), data=st.data())
@settings(max_examples=100, deadline=None)
def test_permuting_the_rows_permutes_the_output(rows, data):
    perm = data.draw(st.permutations(range(len(rows))))
    out = build_estimator("ppo", gamma=0.9, lam=0.8)(_batch(rows))
    shuffled = build_estimator("ppo", gamma=0.9, lam=0.8)(_batch([rows[i] for i in perm]))
    torch.testing.assert_close(shuffled.advantages, out.advantages[list(perm)], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(shuffled.returns, out.returns[list(perm)], rtol=1e-12, atol=1e-12)


def test_the_penalty_enters_the_reward_of_the_invalid_turn():
    """One trajectory of two turns, the first invalid, V = 0, gamma = lam = 1: A = R = (0 - 0.5 + 1, 1)."""
    cols = {
        "rewards": torch.tensor([0.0, 1.0], dtype=torch.float64),
        "group_ids": torch.tensor([0, 0]),
        "traj_ids": torch.tensor([3, 3]),
        "step_ids": torch.tensor([0, 1]),
        "invalid": torch.tensor([True, False]),
        "values": torch.zeros(2, dtype=torch.float64),
    }
    adv = compute_advantages("ppo", **cols, whiten_advantages=False, invalid_action_penalty=0.5)
    assert adv.tolist() == [0.5, 1.0]


def test_without_a_values_column_it_names_the_column_and_its_provider():
    rows = [Row(group=0, traj=0, step=t, reward=1.0, anchor=t, invalid=False) for t in range(3)]
    cols = {k: v for k, v in columns(rows).items() if k not in ("anchor_texts", "values")}
    with pytest.raises(MissingColumnError, match="'values'.*value head"):
        compute_advantages("ppo", **cols)


def test_non_finite_values_are_refused_with_the_row():
    cols = {
        "rewards": torch.zeros(2),
        "group_ids": torch.tensor([0, 0]),
        "traj_ids": torch.tensor([0, 0]),
        "step_ids": torch.tensor([0, 1]),
        "values": torch.tensor([0.0, float("nan")]),
    }
    with pytest.raises(ValueError, match="values must be finite; row 1"):
        compute_advantages("ppo", **cols)


# --- the value loss ---------------------------------------------------------------------------------------


def _loop_value_loss(vpred, targets, old, clip):
    """0.5 * mean over rows of max((V - R)^2, (V_clip - R)^2), from the
    formula (verl ``compute_value_loss``, one value per row; V_clip = clamp(V, old - c, old + c)), and the fraction of rows the clipped term won."""
    losses, clipped = [], 0
    for v, r, o in zip(vpred, targets, old, strict=True):
        plain = (v - r) ** 2
        if clip is None:
            losses.append(plain)
            continue
        vclip = min(max(v, o - clip), o + clip)
        other = (vclip - r) ** 2
        losses.append(max(plain, other))
        clipped += other > plain
    return 0.5 * sum(losses) / len(losses), clipped / len(losses)


_real = st.floats(-10, 10, allow_nan=False)


@given(
    data=st.data(),
    n=st.integers(1, 12),
    clip=st.one_of(st.none(), st.sampled_from([0.1, 0.5]), st.floats(0.01, 5.0)),
)
@settings(max_examples=200, deadline=None)
def test_value_loss_matches_the_formula(data, n, clip):
    vpred, targets, old = (data.draw(st.lists(_real, min_size=n, max_size=n)) for _ in range(3))
    got, clipfrac = value_loss(
        torch.tensor(vpred, dtype=torch.float64),
        torch.tensor(targets, dtype=torch.float64),
        torch.tensor(old, dtype=torch.float64),
        clip,
    )
    want, want_frac = _loop_value_loss(vpred, targets, old, clip)
    assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert float(clipfrac) == pytest.approx(want_frac)


def test_the_clipped_value_gets_no_gradient_beyond_the_clip():
    """V moved 1.0 away from its old value 0 towards nothing: the clipped term (V_clip = 0.5) is the larger
    one, it is constant in V, so V's gradient is 0; unclipped, it is (V - R) / N."""
    vpred = torch.tensor([1.0], requires_grad=True)
    loss, frac = value_loss(vpred, torch.tensor([2.0]), torch.tensor([0.0]), 0.5)
    loss.backward()
    assert (
        float(frac) == 1.0
        and float(loss.detach()) == pytest.approx(0.5 * 1.5**2)
        and float(vpred.grad) == 0.0
    )
    vpred.grad = None
    loss, _ = value_loss(vpred, torch.tensor([2.0]), torch.tensor([0.0]), None)
    loss.backward()
    assert float(vpred.grad) == pytest.approx(-1.0)


def test_the_loss_weighs_the_value_loss_by_value_coef():
    args = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 0.5]), torch.tensor([0.9, -0.8])
    weighted, loss, _ = PolicyLoss(value_coef=0.25, value_clip=None).critic_loss(*args)
    assert float(weighted) == pytest.approx(0.25 * float(loss))
    assert float(loss) == pytest.approx(_loop_value_loss(*(a.tolist() for a in args), None)[0])
    with pytest.raises(ValueError, match="value_coef"):
        PolicyLoss(value_coef=-1.0)
