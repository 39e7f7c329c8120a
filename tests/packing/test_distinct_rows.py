"""The update on distinct rows equals the update on every row: log-probs, entropies and gradients."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm.loss import PolicyLoss
from gigpo_lab.packing.distinct_rows import distinct_rows_logprobs
from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy import build_tiny_policy

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "\n"]
POLICY = build_tiny_policy(VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, seed=0)


def _rows(distinct: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    vocab = POLICY.tokenizer.vocab_size
    prompts = [torch.randint(6, vocab, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()]
    prompts += [
        torch.randint(6, vocab, (len(prompts[0]),), generator=g).tolist() for _ in range(distinct - 1)
    ]
    ids, mask = left_pad(prompts, POLICY.tokenizer.pad_id)
    response = torch.randint(6, vocab, (distinct, 2), generator=g)
    response_mask = torch.ones_like(response, dtype=torch.bool)
    response_mask[::2, 1] = False
    pick = torch.randint(0, distinct, (n,), generator=g)
    return ids[pick], mask[pick], response[pick], response_mask[pick], torch.randn(n, generator=g)


def _loss_and_grads(logprobs_fn, columns, advantages):
    POLICY.zero_grad()
    logp, entropy = logprobs_fn(POLICY, *columns)
    old = logp.detach() + 0.05  # a ratio away from 1, so that the clip is active on some tokens
    out = PolicyLoss(entropy_coef=0.01)(logp, old, advantages, columns[3], entropy)
    out.loss.backward()
    grads = {k: p.grad.clone() for k, p in POLICY.named_parameters() if p.grad is not None}
    return logp.detach(), entropy.detach(), out.loss.detach(), grads


@settings(max_examples=25, deadline=None)
@given(distinct=st.integers(1, 12), n=st.integers(1, 64), seed=st.integers(0, 10_000))
def test_distinct_rows_give_the_plain_loss_and_gradients(distinct, n, seed):
    *columns, advantages = _rows(distinct, n, seed)
    plain = _loss_and_grads(lambda m, *c: m.logprobs(*c), columns, advantages)
    dedup = _loss_and_grads(distinct_rows_logprobs, columns, advantages)
    for a, b in zip(plain[:3], dedup[:3], strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    assert plain[3].keys() == dedup[3].keys()
    for key, grad in plain[3].items():
        torch.testing.assert_close(dedup[3][key], grad, atol=1e-6, rtol=1e-4, msg=key)


@given(
    keys=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    max_share=st.sampled_from([0.0, 0.5, 0.75, 1.0]),
    min_rows=st.integers(0, 12),
)
@settings(max_examples=60, deadline=None)
def test_per_distinct_row_is_the_row_wise_function_of_every_row(keys, max_share, min_rows):
    """Whatever path per_distinct_row takes (plain, gathered, padded), a row-wise function gives each row's own
    value, and it is called on the distinct rows only when they are at most ``max_share`` of the batch."""
    from gigpo_lab.packing.distinct_rows import per_distinct_row

    rows = torch.tensor(keys)[:, None].expand(-1, 3) * torch.tensor([1, 10, 100])
    calls = []

    def score(x):
        calls.append(len(x))
        return (x.sum(1) * 0.5, x[:, :1].float())

    out = per_distinct_row(score, (rows,), max_share=max_share, min_rows=min_rows)
    assert torch.equal(out[0], rows.sum(1) * 0.5) and torch.equal(out[1], rows[:, :1].float())
    distinct = len(set(keys))
    gathered = distinct <= max_share * len(keys)
    assert calls == [max(distinct, min_rows) if gathered else len(keys)]
