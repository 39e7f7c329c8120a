"""GSPO's sequence-level ratio (``loss.ratio_level=sequence``) against the paper's equation written as a loop,
the worked example of ALGORITHMS.md section 8b, and ``ratio_level=token`` against PPO's loss bit for bit."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm.loss import AGGREGATIONS, PolicyLoss, aggregate, clipped_surrogate

L = math.log
# ALGORITHMS.md section 8b: row 0 has two tokens of ratios 1.25 and 1.0 (A = +1), row 1 one token of ratio 1.5
# (A = -2).
LOGP = torch.tensor([[L(0.5), L(0.3)], [L(0.9), 0.0]], dtype=torch.float64)
OLD = torch.tensor([[L(0.4), L(0.3)], [L(0.6), 0.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True], [True, False]])
ADV = torch.tensor([1.0, -2.0], dtype=torch.float64)


def gspo_by_the_paper(logp, old, adv, mask, clip_low, clip_high):
    """-J_GSPO (Zheng et al. 2025, section 4.1, eq. 5) as a loop: the mean over sequences i of
    min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i), with s_i = (pi(y_i) / pi_old(y_i)) ** (1 / |y_i|);
    sequences without a token are left out."""
    terms = []
    for i in range(logp.shape[0]):
        tokens = [t for t in range(logp.shape[1]) if mask[i, t]]
        if not tokens:
            continue
        log_seq = sum(logp[i, t] - old[i, t] for t in tokens)  # log pi(y_i) - log pi_old(y_i)
        s = torch.exp(log_seq / len(tokens))
        clipped = torch.clamp(s, 1 - clip_low, 1 + clip_high)
        terms.append(torch.minimum(s * adv[i], clipped * adv[i]))
    return -sum(terms) / len(terms) if terms else logp.sum() * 0


def test_worked_example():
    """The numbers of ALGORITHMS.md section 8b: s = (sqrt(1.25), 1.5)."""
    ppo = PolicyLoss(clip_low=0.2, clip_high=0.2, aggregation="seq-mean-token-mean", ratio_level="sequence")
    out = ppo(LOGP, OLD, ADV, MASK)
    s0 = math.sqrt(1.25)  # 1.1180: inside [0.8, 1.2], so unclipped
    assert out.pg_loss.item() == pytest.approx((-s0 + 3.0) / 2)  # 0.9410
    assert out.clipfrac.item() == 0.0
    paper = PolicyLoss(
        clip_low=3e-4, clip_high=4e-4, aggregation="seq-mean-token-mean", ratio_level="sequence"
    )
    out = paper(LOGP, OLD, ADV, MASK)
    # row 0: min(1.1180, 1.0004) = 1.0004 (clipped); row 1: A < 0, min(-3.0, -2.0008) = -3.0 (the unclipped)
    assert out.pg_loss.item() == pytest.approx((-1.0004 + 3.0) / 2)  # 0.9998
    assert out.clipfrac.item() == pytest.approx(2 / 3)  # row 0's two tokens of three
    # the token-level loss of the same rows (ALGORITHMS.md section 8): -1.2 and -1.0 on row 0, 3.0 on row 1
    token = PolicyLoss(clip_low=0.2, clip_high=0.2, aggregation="seq-mean-token-mean")
    assert token(LOGP, OLD, ADV, MASK).pg_loss.item() == pytest.approx((-1.1 + 3.0) / 2)
    from gigpo_lab.config_paths import config_root

    doc = (config_root() / "docs" / "ALGORITHMS.md").read_text()
    assert all(number in doc for number in ("1.1180", "0.9410", "−1.0004", "0.9998"))  # the doc's numbers


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5),
    r=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    clip=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (3e-4, 4e-4)]),
)
def test_sequence_loss_and_gradient_match_the_paper(n, r, seed, clip):
    """Loss and gradient equal the paper's loop under seq-mean-token-mean (its 1/G mean over sequences)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, r, generator=g, dtype=torch.float64) * 3
    logp = (old + 0.3 * torch.randn(n, r, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    mask = torch.rand(n, r, generator=g) < 0.7
    assume(bool(mask.any()))  # no token at all: a constant 0, nothing to differentiate
    loss = PolicyLoss(
        clip_low=clip[0], clip_high=clip[1], aggregation="seq-mean-token-mean", ratio_level="sequence"
    )
    got = loss(logp, old, adv, mask).loss
    (grad,) = torch.autograd.grad(got, logp)
    want = gspo_by_the_paper(logp, old, adv, mask, *clip)
    (want_grad,) = torch.autograd.grad(want, logp, allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 10_000), mode=st.sampled_from(AGGREGATIONS))
def test_one_token_rows_give_the_token_level_loss(n, seed, mode):
    """A response of one token is its own sequence: both levels agree (the tiny policy's one-word actions)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, 1, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    mask = torch.ones(n, 1, dtype=torch.bool)
    seq = PolicyLoss(aggregation=mode, ratio_level="sequence")(logp, old, adv, mask)
    tok = PolicyLoss(aggregation=mode)(logp, old, adv, mask)
    torch.testing.assert_close(seq.loss, tok.loss, rtol=1e-12, atol=1e-12)
    assert seq.clipfrac == tok.clipfrac


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_token_level_is_the_ppo_loss_bit_for_bit(mode):
    """ratio_level=token (the default) is PPO's clipped surrogate, aggregated: the same bits, loss and gradient."""
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(6, 5, generator=g)
    logp = (old + 0.4 * torch.randn(6, 5, generator=g)).requires_grad_(True)
    adv = torch.randn(6, generator=g)
    mask = torch.rand(6, 5, generator=g) < 0.6
    out = PolicyLoss(aggregation=mode, ratio_level="token")(logp, old, adv, mask)
    assert PolicyLoss().ratio_level == "token"
    pg, _ = clipped_surrogate(logp, old, adv, 0.2, 0.2)
    want = aggregate(pg, mask, mode)
    assert torch.equal(out.loss, want)
    (grad,) = torch.autograd.grad(out.loss, logp)
    logp2 = logp.detach().clone().requires_grad_(True)
    (want_grad,) = torch.autograd.grad(
        aggregate(clipped_surrogate(logp2, old, adv, 0.2, 0.2)[0], mask, mode), logp2
    )
    assert torch.equal(grad, want_grad)


def test_unknown_ratio_level_names_the_valid_ones():
    with pytest.raises(ValueError, match="token, sequence"):
        PolicyLoss(ratio_level="turn")


def test_loss_gspo_trains_a_tiny_run(tiny_overrides):
    """loss=gspo end to end (the tiny policy's packed update path): finite, and the paper's narrow clip bites."""
    from tiny_sizes import MOVES_AT_ONCE

    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import train

    metrics = train(compose_config([*tiny_overrides, "loss=gspo", MOVES_AT_ONCE]))
    assert math.isfinite(metrics["train/loss"])
    assert metrics["train/clipfrac"] > 0  # after the first step, ratios leave [1 - 3e-4, 1 + 4e-4]
