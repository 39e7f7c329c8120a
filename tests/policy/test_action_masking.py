"""Invalid-action masking (``model.mask_inadmissible``): the tiny policy's response is drawn among the state's
admissible commands, and the scoring and the update take every log-prob under the same restricted distribution.

The oracle is written from the definition (Huang & Ontañón 2022, arXiv 2006.14171): the masked policy is the
softmax of the logits over the allowed tokens alone, p(a) = exp(z_a / t) / sum_{j allowed} exp(z_j / t).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from real_runs import history, run_cfg

from gigpo_lab.envs import make_env
from gigpo_lab.packing.distinct_rows import distinct_rows_logprobs
from gigpo_lab.packing.logprobs import response_logprobs
from gigpo_lab.packing.microbatch import chunked_logprobs
from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.rollout import build_torch_engine
from gigpo_lab.rollout.collector import Collector
from gigpo_lab.train import train


def household():
    return make_env("gigpo_lab/Household-v0", max_turns=8)


def tiny(mask: bool, seed: int = 0):
    env = household().unwrapped
    return build_tiny_policy(
        env.vocabulary(), d_model=32, seed=seed, actions=env.action_names, mask_inadmissible=mask
    )


def collect(policy, seed: int = 0):
    collector = Collector(household, policy, build_torch_engine(policy), groups=2, group_size=4)
    return collector.collect([11, 12], torch.Generator().manual_seed(seed))


def oracle(logits: list[float], allowed: list[bool], token: int, t: float) -> tuple[float, float]:
    """log p(token) and the entropy of the masked, tempered softmax, in plain floats."""
    z = [x / t for x, ok in zip(logits, allowed, strict=True) if ok]
    top = max(z)
    norm = top + math.log(sum(math.exp(x - top) for x in z))
    probs = [math.exp(x - norm) for x in z]
    return logits[token] / t - norm, -sum(p * math.log(p) for p in probs if p > 0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 9).flatmap(
        lambda v: st.tuples(
            st.lists(st.floats(-6, 6), min_size=v, max_size=v),
            st.lists(st.booleans(), min_size=v, max_size=v),
            st.lists(st.floats(-6, 6), min_size=v, max_size=v),
        )
    ),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.data(),
)
def test_restricted_logprobs_match_the_oracle(rows, t, data):
    first, allowed, second = rows
    allowed = [*allowed[:-1], True] if not any(allowed) else allowed
    token = data.draw(st.sampled_from([j for j, ok in enumerate(allowed) if ok]))
    nxt = data.draw(st.integers(0, len(first) - 1))
    logits = torch.tensor([[first, second]], dtype=torch.float64)
    logp, entropy = response_logprobs(
        logits,
        torch.tensor([[token, nxt]]),
        torch.ones(1, 2, dtype=torch.bool),
        t,
        torch.tensor([allowed]),
    )
    want_logp, want_entropy = oracle(first, allowed, token, t)
    assert logp[0, 0].item() == pytest.approx(want_logp, abs=1e-5)
    assert entropy[0, 0].item() == pytest.approx(want_entropy, abs=1e-5)
    # the second position is not restricted: the plain tempered softmax
    plain_logp, plain_entropy = oracle(second, [True] * len(second), nxt, t)
    assert logp[0, 1].item() == pytest.approx(plain_logp, abs=1e-5)
    assert entropy[0, 1].item() == pytest.approx(plain_entropy, abs=1e-5)


def test_masked_rollouts_play_only_admissible_commands_and_score_as_sampled():
    unmasked, _ = collect(tiny(mask=False))
    batch, metrics = collect(tiny(mask=True))
    policy = tiny(mask=True)
    assert unmasked.invalid.any(), "the unmasked policy plays inadmissible commands at this seed"
    assert unmasked.allowed_tokens is None
    assert not batch.invalid.any() and metrics["rollout/invalid_rate"] == 0.0
    rows = torch.arange(len(batch))
    assert batch.allowed_tokens.shape == (len(batch), policy.model.tok_emb.num_embeddings)
    assert batch.allowed_tokens[rows, batch.response_ids[:, 0]].all()
    assert (batch.allowed_tokens.sum(1) < batch.allowed_tokens.shape[1] // 2).all()  # a real restriction
    # the update's log-probs of the same rows are the engine's sampling log-probs (ratio 1 before any update)
    with torch.no_grad():
        logp, entropy = policy.logprobs(*batch.token_columns())
        plain, _ = policy.logprobs(*batch.token_columns()[:4])
    torch.testing.assert_close(logp, batch.old_logprobs, atol=1e-5, rtol=0)
    assert torch.isfinite(entropy).all()
    first = batch.response_mask[:, 0]
    assert (plain[first, 0] < logp[first, 0]).all()  # the restriction moves mass onto the allowed tokens


def test_every_scoring_path_takes_the_restriction():
    policy = tiny(mask=True)
    batch, _ = collect(policy, seed=3)
    cols = batch.token_columns()
    with torch.no_grad():
        want, want_entropy = policy.logprobs(*cols)
        for shared in (False, True):
            got, got_entropy = chunked_logprobs(
                policy, cols, 3, 1.0, torch.device("cpu"), shared_prefix=shared
            )
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
            torch.testing.assert_close(got_entropy, want_entropy, atol=1e-5, rtol=0)
        got, _ = distinct_rows_logprobs(policy, *cols)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_a_masked_training_run_never_plays_an_invalid_command(tiny_overrides, tmp_path):
    cfg = run_cfg(
        tiny_overrides,
        tmp_path,
        "masked",
        "env=household",
        "model.mask_inadmissible=true",
        "trainer.micro_batch_size=3",
        "trainer.iterations=1",
        "trainer.eval_every=1",
    )
    train(cfg)
    uri = cfg.tracking.uri
    assert [v for _, v in history(uri, "rollout/invalid_rate")] == [0.0]
    # the update starts from the rollout's own distribution: rescoring reproduces the sampling log-probs
    gaps = [v for _, v in history(uri, "rollout/logprob_gap")]
    assert len(gaps) == 1 and gaps[0] < 1e-5
    # the held-out evaluations (before and after the update) ran through the same masked policy
    assert len(history(uri, "eval/success_rate")) == 2


@pytest.mark.parametrize("mask", [False, True])
def test_the_option_reaches_the_policy(mask, tiny_overrides, tmp_path):
    from hydra.utils import instantiate

    cfg = run_cfg(tiny_overrides, tmp_path, "opt", "env=household", f"model.mask_inadmissible={mask}")
    env = household()
    _, info = env.reset(seed=0)
    policy = instantiate(cfg.model)(vocabulary=env.unwrapped.vocabulary(), actions=env.unwrapped.action_names)
    allowed = policy.allowed_tokens(info["admissible_actions"])
    assert (allowed is not None) == mask
    if mask:
        assert allowed.sum().item() == len(info["admissible_actions"])


def test_greedy_loop_reports_use_the_restricted_distribution():
    from gigpo_lab.analysis.loops import action_probabilities, action_token_ids

    policy = tiny(mask=True)
    batch, _ = collect(policy)
    names = household().unwrapped.action_names
    ids = action_token_ids(policy.tokenizer, names)
    row = slice(0, 1)
    columns = (
        batch.prompt_ids[row],
        batch.prompt_mask[row],
        batch.response_ids[row],
        batch.response_mask[row],
    )
    probs = action_probabilities(policy, *columns, ids, batch.allowed_tokens[row])
    allowed = batch.allowed_tokens[0, ids]
    assert (probs[~allowed] == 0).all() and probs[allowed].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert (
        action_probabilities(policy, *columns, ids)[allowed].sum().item() < 0.99
    )  # unrestricted: mass elsewhere
