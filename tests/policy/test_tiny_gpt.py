"""TinyGPT's last block computed at the kept positions only: the same bits as the full block, gradients and
optimizer steps included (the oracle is the same model with ``prune_last_block = False``)."""

from __future__ import annotations

import pytest
import torch
from experiment_scripts import load_script
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.policy.tiny_gpt import MIN_KEPT_ROWS, TinyGPT

# The block-attention case (both paths, weights from the seed) is built by the script that measures its rounding.
rounding = load_script("bench/block_attention_rounding.py")

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "\n"]


@pytest.fixture(autouse=True)
def one_thread_and_restore():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    TinyGPT.prune_last_block = True
    torch.set_num_threads(threads)


def rows(n: int, p: int, r: int, vocab: int, g: torch.Generator):
    """n rows of left-padded prompts (1..p tokens) and right-padded responses (1..r tokens)."""
    prompt_mask = torch.arange(p)[None] >= (p - torch.randint(1, p + 1, (n,), generator=g))[:, None]
    prompt_ids = torch.randint(7, vocab, (n, p), generator=g).masked_fill(~prompt_mask, 0)
    response_mask = torch.arange(r)[None] < torch.randint(1, r + 1, (n,), generator=g)[:, None]
    response_ids = torch.randint(7, vocab, (n, r), generator=g).masked_fill(~response_mask, 0)
    return prompt_ids, prompt_mask, response_ids, response_mask


def train_steps(
    prune: bool, n: int, p: int, r: int, d_model: int, seed: int, qk_norm: bool = False
) -> list[torch.Tensor]:
    """Three AdamW steps of a weighted log-prob + entropy loss; every log-prob, gradient and weight seen."""
    TinyGPT.prune_last_block = prune
    policy = build_tiny_policy(VOCAB, d_model=d_model, n_heads=4, max_seq_len=64, seed=seed, qk_norm=qk_norm)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    seen: list[torch.Tensor] = []
    for _ in range(3):
        batch = rows(n, p, r, policy.tokenizer.vocab_size, g)
        logp, entropy = policy.logprobs(*batch, temperature=0.9)
        (-(logp * torch.randn(logp.shape, generator=g)).sum() - 0.01 * entropy.sum()).backward()
        seen += [logp.detach(), entropy.detach(), *(q.grad.clone() for q in policy.parameters())]
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    return seen + [q.detach().clone() for q in policy.parameters()]


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 160),
    p=st.integers(1, 24),
    r=st.integers(1, 3),
    d_model=st.sampled_from([32, 128]),
    seed=st.integers(0, 1000),
    qk_norm=st.booleans(),
)
def test_pruned_last_block_trains_bit_for_bit(n, p, r, d_model, seed, qk_norm):
    full = train_steps(False, n, p, r, d_model, seed, qk_norm)
    pruned = train_steps(True, n, p, r, d_model, seed, qk_norm)
    assert len(full) == len(pruned)
    assert all(torch.equal(a, b) for a, b in zip(full, pruned, strict=True))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 64), p=st.integers(2, 20), seed=st.integers(0, 1000))
def test_pruned_prefill_gives_the_same_logits_and_cache(n, p, seed):
    """The engine's calls: a prefill keeping the last logits, then one cached step."""
    policy = build_tiny_policy(VOCAB, d_model=128, seed=seed).eval()
    ids, mask, _, _ = rows(n, p, 1, policy.tokenizer.vocab_size, torch.Generator().manual_seed(seed))
    out = {}
    for prune in (False, True):
        TinyGPT.prune_last_block = prune
        with torch.no_grad():
            logits, cache = policy.forward_logits(ids, mask, None, logits_to_keep=1)
            token = logits[:, -1].argmax(-1, keepdim=True)
            step_mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            logits2, cache2 = policy.forward_logits(token, step_mask, cache, logits_to_keep=1)
        out[prune] = [logits, logits2, *(t for kv in cache2 for t in kv)]
    assert all(torch.equal(a, b) for a, b in zip(out[False], out[True], strict=True))


def test_the_pruned_last_block_keeps_the_bits_at_every_row_count_around_its_bound():
    """MIN_KEPT_ROWS is where BLAS stops rounding a few kept rows differently from the whole layer: check every
    kept-row count below and above it (one kept position per row, as the engine's prefill)."""
    policy = build_tiny_policy(VOCAB, d_model=128, seed=3).eval()
    for n in range(1, 2 * MIN_KEPT_ROWS + 1):
        ids, mask, _, _ = rows(n, 12, 1, policy.tokenizer.vocab_size, torch.Generator().manual_seed(n))
        out = {}
        for prune in (False, True):
            TinyGPT.prune_last_block = prune
            with torch.no_grad():
                out[prune] = policy.forward_logits(ids, mask, None, logits_to_keep=1)[0]
        TinyGPT.prune_last_block = True
        assert torch.equal(out[False], out[True]), n


ROUNDING_EPS = 64  # float32 epsilons of a tensor's largest entry: 8.8x the worst rounding difference measured


@settings(max_examples=30, deadline=None)
@given(
    t=st.integers(1, 40),
    prefix=st.integers(0, 5),
    block=st.integers(1, 16),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 1000),
)
def test_block_attention_equals_the_dense_mask(t, prefix, block, density, seed):
    """A packed row's attention in query blocks over the keys each block needs (``BlockMask``) gives what one
    attention over the dense mask gives, outputs and gradients, for any pattern where a query sees itself.

    The two differ only in float32 summation order (other matrix shapes, other BLAS kernels), so each tensor is
    compared within ``ROUNDING_EPS`` float32 epsilons of its own largest entry. Over 1,500 random draws of these
    arguments the worst difference was 7.3 epsilons of that scale, and one flipped mask entry was caught in every
    draw (``python experiments/bench/block_attention_rounding.py`` measures both). A fixed ``atol=1e-5`` failed
    on gradients of size ~20, which are 1.1e-5 apart by rounding alone. The layer's weights come from ``seed``
    too, so a failing example reproduces."""
    outs = rounding.attend_both(t, prefix, block, density, seed, flip=False)  # (dense, blocked)
    for dense, blocked in zip(*outs, strict=True):
        scale = dense.abs().max().item()
        torch.testing.assert_close(
            blocked, dense, atol=ROUNDING_EPS * torch.finfo(dense.dtype).eps * scale, rtol=0
        )
