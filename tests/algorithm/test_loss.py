"""The loss against hand-computed numbers: clip active and inactive, each KL estimator, each aggregation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm.loss import AGGREGATIONS, KL_ESTIMATORS, PolicyLoss, aggregate, kl_per_token

L = math.log
# Two rows; row 1 has one real token. Ratios: 1.25 (A=+1, clip active), 1.0 (A=+1), 1.5 (A=-2, clip inactive).
LOGP = torch.tensor([[L(0.5), L(0.3)], [L(0.9), 0.0]], dtype=torch.float64)
OLD = torch.tensor([[L(0.4), L(0.3)], [L(0.6), 0.0]], dtype=torch.float64)
REF = torch.tensor([[L(0.25), L(0.6)], [L(0.9), 0.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True], [True, False]])
ADV = torch.tensor([1.0, -2.0], dtype=torch.float64)
# per-token surrogate by hand: -min(1.25*1, 1.2*1) = -1.2; -min(1.0, 1.0) = -1.0; -min(1.5*-2, 1.2*-2) = 3.0
PG = {
    "token-mean": (-1.2 - 1.0 + 3.0) / 3,
    "seq-mean-token-mean": (-1.1 + 3.0) / 2,
    "seq-mean-token-sum": (-2.2 + 3.0) / 2,
}
# KL per token, r = pi_ref / pi: (0.5, 2.0, 1.0) on the real tokens
K1 = [L(2.0), -L(2.0), 0.0]
K2 = [0.5 * L(2.0) ** 2, 0.5 * L(2.0) ** 2, 0.0]
K3 = [0.5 - L(0.5) - 1.0, 2.0 - L(2.0) - 1.0, 0.0]
KL_TOKENS = {"k1": K1, "k2": K2, "k3": K3}


def _agg_by_hand(tokens, mode):
    rows = [tokens[:2], tokens[2:]]
    if mode == "token-mean":
        return sum(tokens) / 3
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / 2
    return sum(sum(r) for r in rows) / 2


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_clipped_surrogate_by_hand(mode):
    out = PolicyLoss(aggregation=mode, kl_coef=0.0)(LOGP, OLD, ADV, MASK)
    assert out.pg_loss.item() == pytest.approx(PG[mode], abs=1e-12)
    assert out.loss.item() == pytest.approx(PG[mode], abs=1e-12)
    assert out.clipfrac.item() == pytest.approx(1 / 3)  # only the first token's clip is the active term


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_kl_in_loss_by_hand(estimator, mode):
    beta = 0.1
    out = PolicyLoss(aggregation=mode, kl_coef=beta, kl_estimator=estimator)(
        LOGP, OLD, ADV, MASK, ref_logp=REF
    )
    kl = _agg_by_hand(KL_TOKENS[estimator], mode)
    assert out.kl.item() == pytest.approx(kl, abs=1e-12)
    assert out.loss.item() == pytest.approx(PG[mode] + beta * kl, abs=1e-12)


def test_kl_in_reward_leaves_the_loss_and_penalises_rows():
    loss = PolicyLoss(kl_coef=0.1, kl_in_reward=True)
    out = loss(LOGP, OLD, ADV, MASK, ref_logp=REF)
    assert out.loss.item() == pytest.approx(PG["token-mean"], abs=1e-12)
    penalty = loss.reward_penalty(LOGP, REF, MASK)
    assert penalty.tolist() == pytest.approx([0.1 * (K1[0] + K1[1]), 0.1 * K1[2]], abs=1e-12)


def test_entropy_bonus_is_subtracted():
    ent = torch.tensor([[1.0, 2.0], [3.0, 100.0]], dtype=torch.float64)  # the masked 100 must not count
    out = PolicyLoss(entropy_coef=0.5, kl_coef=0.0)(LOGP, OLD, ADV, MASK, entropy=ent)
    assert out.entropy.item() == pytest.approx(2.0)
    assert out.loss.item() == pytest.approx(PG["token-mean"] - 0.5 * 2.0, abs=1e-12)


def test_bad_options_name_the_valid_ones():
    with pytest.raises(ValueError, match="token-mean"):
        PolicyLoss(aggregation="mean")(LOGP, OLD, ADV, MASK)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_per_token(LOGP, REF, "k4")


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 6),
    st.sampled_from(AGGREGATIONS),
    st.integers(0, 2**31 - 1),
)
def test_masked_tokens_do_not_change_the_loss(n, r, mode, seed):
    """Perturbing log-probs under the mask leaves the loss and its parts unchanged (verl's property test)."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, r, generator=g, dtype=torch.float64)
    old = -torch.rand(n, r, generator=g, dtype=torch.float64)
    ref = -torch.rand(n, r, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    mask = torch.rand(n, r, generator=g) > 0.3
    noise = torch.randn(n, r, generator=g, dtype=torch.float64) * (~mask)
    loss = PolicyLoss(aggregation=mode, kl_coef=0.05, entropy_coef=0.01)
    a = loss(logp, old, adv, mask, entropy=-logp, ref_logp=ref)
    b = loss(logp + noise, old - noise, adv, mask, entropy=-(logp + noise), ref_logp=ref + noise)
    assert torch.isfinite(a.loss)
    assert a.loss.item() == pytest.approx(b.loss.item(), abs=1e-12)
    assert aggregate(torch.ones(n, r, dtype=torch.float64), mask, "token-mean").item() == (
        1.0 if mask.any() else 0.0
    )
