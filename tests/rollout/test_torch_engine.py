"""The torch engine against independent references: policy.logprobs, a no-cache decode, a manual nucleus."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy import build_hf_policy, build_tiny_policy
from gigpo_lab.rollout import Engine, SamplingParams, TorchEngine, build_torch_engine
from gigpo_lab.rollout.torch_engine import sample_tokens

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "\n", "You", "are", "on", "a", "lake"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_policy(VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, seed=1)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return build_hf_policy(str(build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))))


@pytest.fixture(scope="module")
def tiny_qk():
    """The tiny policy with QK-LayerNorm: its cached keys are the normalised ones."""
    return build_tiny_policy(VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, seed=1, qk_norm=True)


@pytest.fixture(params=["tiny", "tiny_qk", "hf"])
def policy(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(params=[False, True], ids=["distinct", "shared"])
def shared(request):
    """Prompt batches without, and with, duplicates and a common prefix (``shared_prefill``'s two paths)."""
    return request.param


def ragged_prompts(policy, n: int, seed: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """n random prompts of 1..12 tokens (ids >= 6: no specials), left-padded. ``shared``: every prompt starts
    with the same 10 tokens and the n rows repeat n // 3 distinct prompts (like a collection batch)."""
    g = torch.Generator().manual_seed(seed)
    vocab = len(policy.tokenizer.tokens) if hasattr(policy.tokenizer, "tokens") else len(policy.tokenizer.hf)
    distinct = max(1, n // 3) if shared else n
    prefix = torch.randint(6, vocab, (10 if shared else 0,), generator=g).tolist()
    lengths = torch.randint(1, 13, (distinct,), generator=g).tolist()
    suffixes = [torch.randint(6, vocab, (k,), generator=g).tolist() for k in lengths]
    return left_pad([prefix + suffixes[i % distinct] for i in range(n)], policy.tokenizer.pad_id)


def reference_greedy(policy, prompt_ids, prompt_mask, max_new_tokens):
    """Greedy decoding without a cache: a full forward over prompt + generated tokens at every step."""
    stop = set(policy.stop_ids())
    rows = []
    for ids, mask in zip(prompt_ids, prompt_mask, strict=True):
        seq = ids[mask].tolist()
        out = []
        for _ in range(max_new_tokens):
            x = torch.tensor([seq + out])
            logits, _ = policy.forward_logits(x, torch.ones_like(x, dtype=torch.bool), None, use_cache=False)
            out.append(int(logits[0, -1].argmax()))
            if out[-1] in stop:
                break
        rows.append(out)
    return rows


def test_engine_satisfies_the_protocol(tiny):
    assert isinstance(TorchEngine(tiny, SamplingParams()), Engine)


def test_sampling_logprobs_equal_policy_logprobs(policy, shared):
    """Temperature 1, top_p 1: the engine's log-probs are the policy's, with ragged prompts and early stops."""
    max_new = 8 if policy.default_max_new_tokens == 1 else 24
    prompt_ids, prompt_mask = ragged_prompts(policy, 24, seed=0, shared=shared)
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=max_new))
    out = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
    lengths = out.response_mask.sum(1)
    assert (lengths < max_new).any() and (lengths == max_new).any(), "the case needs early and late stops"
    ends = out.response_ids[torch.arange(len(lengths)), lengths - 1]
    stopped = torch.isin(ends, torch.tensor(policy.stop_ids()))
    assert (stopped | (lengths == max_new)).all(), "a row ends only at a stop id or at max_new_tokens"
    assert (out.response_mask[:, :-1] >= out.response_mask[:, 1:]).all(), "right-padded"
    assert (out.response_ids[~out.response_mask] == policy.tokenizer.pad_id).all()
    with torch.no_grad():
        logp, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, out.response_mask)
    torch.testing.assert_close(out.logprobs, logp, atol=1e-5, rtol=0)
    assert (out.logprobs[~out.response_mask] == 0).all()
    assert out.texts == [
        policy.tokenizer.decode(r[m].tolist())
        for r, m in zip(out.response_ids, out.response_mask, strict=True)
    ]


def test_kv_cache_matches_a_no_cache_decode(policy, shared):
    prompt_ids, prompt_mask = ragged_prompts(policy, 9, seed=1, shared=shared)
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=6))
    out = engine.generate(prompt_ids, prompt_mask, greedy=True)
    cached = [r[m].tolist() for r, m in zip(out.response_ids, out.response_mask, strict=True)]
    with torch.no_grad():
        assert cached == reference_greedy(policy, prompt_ids, prompt_mask, 6)


def test_generation_is_deterministic_given_the_generator_seed(policy):
    prompt_ids, prompt_mask = ragged_prompts(policy, 6, seed=2)
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=5, temperature=1.5))
    a, b, c = (
        engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(s))
        for s in (7, 7, 8)
    )
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_a_row_with_its_own_generator_samples_what_it_samples_alone(policy):
    """One generator per row (held-out evaluation's per-episode streams): each row's tokens are those it samples
    alone from the same seed, whatever rows share its batch and whenever they stop."""
    prompt_ids, prompt_mask = ragged_prompts(policy, 6, seed=2)
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=5, temperature=1.5))

    def streams(rows):
        return [torch.Generator().manual_seed(100 + r) for r in rows]

    batch = engine.generate(prompt_ids, prompt_mask, generator=streams(range(6)))
    for r in range(6):
        ids = prompt_ids[r][prompt_mask[r]][None]
        alone = engine.generate(ids, torch.ones_like(ids, dtype=torch.bool), generator=streams([r]))
        width = alone.response_ids.shape[1]
        assert batch.response_ids[r, :width].tolist() == alone.response_ids[0].tolist(), r
        assert not batch.response_mask[r, width:].any()
    with pytest.raises(ValueError, match="5 generators for 6 prompts"):
        engine.generate(prompt_ids, prompt_mask, generator=streams(range(5)))


def manual_nucleus_logprobs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Reference (one row at a time, with Python lists): tempered softmax restricted to the nucleus."""
    probs = torch.softmax(logits.double() / temperature, -1)
    out = torch.full_like(probs, float("-inf"))
    for r in range(probs.shape[0]):
        kept, mass = [], 0.0
        for j in sorted(range(probs.shape[1]), key=lambda j: -float(probs[r, j])):
            if mass >= top_p:
                break
            kept.append(j)
            mass += float(probs[r, j])
        out[r, kept] = (probs[r, kept] / probs[r, kept].sum()).log()
    return out


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.0, 0.5), (1.3, 0.9)])
def test_tempered_nucleus_logprobs(tiny, temperature, top_p):
    """The engine's log-probs are those of the distribution it samples from, and it never leaves the nucleus."""
    prompt_ids, prompt_mask = ragged_prompts(tiny, 16, seed=3)
    engine = TorchEngine(tiny, SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=4))
    out = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(3))
    ids = torch.cat([prompt_ids, out.response_ids], 1)
    mask = torch.cat([prompt_mask, out.response_mask], 1)
    with torch.no_grad():
        logits, _ = tiny.forward_logits(ids, mask, None, use_cache=False)
    width = out.response_ids.shape[1]
    logits = logits[:, -width - 1 : -1][out.response_mask]
    reference = manual_nucleus_logprobs(logits, temperature, top_p)
    chosen = reference.gather(-1, out.response_ids[out.response_mask][:, None]).squeeze(-1)
    assert torch.isfinite(chosen).all(), "every sampled token lies in the nucleus"
    torch.testing.assert_close(out.logprobs[out.response_mask].double(), chosen, atol=1e-5, rtol=0)


def test_inverse_cdf_sampling_follows_the_distribution():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    log_dist = probs.log().expand(20_000, -1)
    tokens = sample_tokens(log_dist, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=5).double() / len(tokens)
    assert freq[1] == 0 and freq[4] == 0
    torch.testing.assert_close(freq, probs.double(), atol=0.015, rtol=0)


def test_builder_uses_the_policy_default_budget(tiny, hf):
    assert build_torch_engine(tiny).sampling.max_new_tokens == 1
    assert build_torch_engine(hf).sampling.max_new_tokens == 32
    assert build_torch_engine(tiny, max_new_tokens=3, temperature=0.5).sampling == SamplingParams(0.5, 1.0, 3)


def test_tiny_policy_answers_with_one_word(tiny):
    prompt_ids, prompt_mask = ragged_prompts(tiny, 32, seed=4)
    out = build_torch_engine(tiny).generate(
        prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0)
    )
    assert out.response_ids.shape == (32, 1)
    assert all(len(t.split()) <= 1 for t in out.texts)


def test_generate_restores_the_training_mode(tiny):
    tiny.train()
    prompt_ids, prompt_mask = ragged_prompts(tiny, 2, seed=5)
    TorchEngine(tiny, SamplingParams()).generate(prompt_ids, prompt_mask)
    assert tiny.training


@pytest.mark.parametrize(
    "kwargs", [{"temperature": 0.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_new_tokens": 0}]
)
def test_bad_sampling_params_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_scoring_at_the_sampling_temperature_equals_the_sampling_logprobs(policy, temperature):
    """The trainer scores old/current log-probs at the rollout temperature; with top_p = 1 they must equal the
    engine's sampling log-probs, so the PPO ratio starts at exactly 1."""
    prompt_ids, prompt_mask = ragged_prompts(policy, 12, seed=5)
    engine = TorchEngine(policy, SamplingParams(temperature=temperature, max_new_tokens=4))
    out = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        scored, _ = policy.logprobs(
            prompt_ids, prompt_mask, out.response_ids, out.response_mask, temperature=temperature
        )
        untempered, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, out.response_mask)
    m = out.response_mask
    torch.testing.assert_close(scored[m], out.logprobs[m], atol=1e-5, rtol=0)
    assert not torch.allclose(untempered[m], out.logprobs[m], atol=1e-3)  # temperature 1 would be off-policy


def _lora_policy(folder, seed: int = 3):
    """A tiny HF policy with LoRA adapters that change its output (B drawn, not 0)."""
    policy = build_hf_policy(
        str(build_tiny_hf_model(folder)),
        lora={"enabled": True, "r": 4, "alpha": 8, "target_modules": "all-linear"},
    )
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0.0, 0.3)
    return policy


def test_a_session_merges_the_adapters_once_for_all_its_generate_calls(tmp_path):
    policy = _lora_policy(tmp_path / "qwen2")
    engine = build_torch_engine(policy, max_new_tokens=4, merge_lora=True)
    merges, merge = [], policy.merged_weights
    policy.merged_weights = lambda: (merges.append(1), merge())[1]
    prompt_ids, prompt_mask = ragged_prompts(policy, 6, seed=5, shared=True)
    alone = engine.generate(prompt_ids, prompt_mask, greedy=True)
    assert len(merges) == 1
    with engine.session():
        first = engine.generate(prompt_ids, prompt_mask, greedy=True)
        second = engine.generate(prompt_ids, prompt_mask, greedy=True)
    assert len(merges) == 2, "one merge for the whole session"
    assert torch.equal(first.response_ids, alone.response_ids) and torch.equal(
        second.logprobs, alone.logprobs
    )
    with torch.no_grad():
        adapters_on, _ = policy.logprobs(prompt_ids, prompt_mask, alone.response_ids, alone.response_mask)
    torch.testing.assert_close(alone.logprobs, adapters_on, atol=1e-5, rtol=0)


@pytest.mark.parametrize("merge_lora", [False, True], ids=["adapters", "merged"])
@pytest.mark.parametrize("prefill", ["plain", "shared", "tree"])
def test_every_prefill_and_merged_adapters_sample_the_policy(tmp_path_factory, prefill, merge_lora):
    """A LoRA policy with trained (non-zero) adapters: each prefill, with the adapters run or merged, gives the
    no-cache greedy decode and sampling log-probs equal to ``policy.logprobs`` within 1e-5."""
    policy = _lora_policy(tmp_path_factory.mktemp("qwen2"))
    engine = build_torch_engine(policy, max_new_tokens=6, prefill=prefill, merge_lora=merge_lora)
    _assert_samples_the_policy(engine, policy, *ragged_prompts(policy, 12, seed=4, shared=True), 6)


def _assert_samples_the_policy(engine, policy, prompt_ids, prompt_mask, max_new: int) -> None:
    """The engine's cached greedy decode equals the no-cache one, and its sampling log-probs equal
    ``policy.logprobs`` within 1e-5."""
    out = engine.generate(prompt_ids, prompt_mask, greedy=True)
    with torch.no_grad():
        cached = [r[m].tolist() for r, m in zip(out.response_ids, out.response_mask, strict=True)]
        assert cached == reference_greedy(policy, prompt_ids, prompt_mask, max_new)
        sampled = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
        logp, _ = policy.logprobs(prompt_ids, prompt_mask, sampled.response_ids, sampled.response_mask)
    torch.testing.assert_close(sampled.logprobs, logp, atol=1e-5, rtol=0)


def test_an_unknown_prefill_is_refused(hf):
    with pytest.raises(ValueError, match="prefill='radix' is not one of"):
        build_torch_engine(hf, prefill="radix")


@pytest.mark.parametrize("prefill", ["shared", "tree"])
def test_the_tiny_policys_prefills_sample_the_policy(prefill):
    """The tiny policy's tree prefill (a dense packed mask, its cache cut into rows) and its shared one: the
    no-cache greedy decode, and sampling log-probs equal to ``policy.logprobs`` within 1e-5."""
    policy = build_tiny_policy([str(i) for i in range(40)], d_model=32, n_heads=2, max_seq_len=64, seed=5)
    engine = build_torch_engine(policy, max_new_tokens=4, prefill=prefill)
    _assert_samples_the_policy(engine, policy, *ragged_prompts(policy, 12, seed=6, shared=True), 4)


def test_a_per_call_temperature_replaces_the_engines_own(tiny):
    """``generate(temperature=t)`` samples that call at t (sampled evaluation at rollout.eval_temperature): its
    log-probs are the policy's at t, and the engine's own temperature is untouched for the next call."""
    prompt_ids, prompt_mask = ragged_prompts(tiny, 12, seed=6)
    engine = TorchEngine(tiny, SamplingParams(temperature=1.0, max_new_tokens=4))
    out = engine.generate(
        prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(6), temperature=0.4
    )
    with torch.no_grad():
        at_04, _ = tiny.logprobs(
            prompt_ids, prompt_mask, out.response_ids, out.response_mask, temperature=0.4
        )
    m = out.response_mask
    torch.testing.assert_close(at_04[m], out.logprobs[m], atol=1e-5, rtol=0)
    assert engine.sampling.temperature == 1.0


@pytest.mark.parametrize("prefill", ["shared", "tree"])
def test_autocast_samples_the_policy_at_that_precision(tmp_path, prefill):
    """``autocast=bfloat16``: the engine's sampling log-probs are the policy's scored under the same autocast
    (up to the cache's bf16 rounding), they differ from the float32 ones by bf16 rounding only, and the autocast
    ends with the call."""
    policy = _lora_policy(tmp_path / "qwen2")
    engine = build_torch_engine(policy, max_new_tokens=6, prefill=prefill, autocast="bfloat16")
    prompt_ids, prompt_mask = ragged_prompts(policy, 12, seed=4, shared=True)
    out = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
    assert not torch.is_autocast_enabled("cpu")
    m = out.response_mask
    with torch.no_grad():
        fp32, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, m)
        with torch.autocast("cpu", torch.bfloat16):
            bf16, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, m)
    assert out.logprobs.dtype == torch.float32
    to_bf16 = (out.logprobs[m] - bf16[m].float()).abs().max().item()
    to_fp32 = (out.logprobs[m] - fp32[m]).abs().max().item()
    # measured: 6e-4 and 4e-3; the engine's numbers are the bf16 ones, not the float32 ones, nor far from them
    assert to_bf16 < 2e-3 and 2 * to_bf16 < to_fp32 < 0.05


def test_an_unknown_autocast_is_refused(hf):
    with pytest.raises(ValueError, match="autocast='float32' is not null or one of"):
        build_torch_engine(hf, autocast="float32")


def test_merged_adapters_under_autocast_stay_float32(tmp_path):
    """``merge_lora`` with ``autocast``: the merge runs outside the autocast, so every weight the sampler runs is
    float32 (merged under the autocast, ``addmm`` would have made them bf16), and the weights are restored."""
    policy = _lora_policy(tmp_path / "qwen2")
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    dtypes, merge = [], policy.merged_weights

    @contextlib.contextmanager
    def watched():
        with merge():
            dtypes.extend(p.dtype for p in policy.parameters())
            yield

    policy.merged_weights = watched
    engine = build_torch_engine(policy, max_new_tokens=4, merge_lora=True, autocast="bfloat16")
    engine.generate(*ragged_prompts(policy, 6, seed=5, shared=True), greedy=True)
    assert dtypes and set(dtypes) == {torch.float32}
    assert all(torch.equal(p, before[n]) for n, p in policy.named_parameters())


def test_without_the_option_the_callers_autocast_stays_in_force(tmp_path):
    """``autocast=None`` enters no context: under a caller's bf16 autocast the engine samples the bf16 numbers,
    as ``policy.logprobs`` under the same autocast gives them."""
    policy = _lora_policy(tmp_path / "qwen2")
    engine = build_torch_engine(policy, max_new_tokens=6)
    prompt_ids, prompt_mask = ragged_prompts(policy, 12, seed=4, shared=True)
    with torch.autocast("cpu", torch.bfloat16):
        out = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
    m = out.response_mask
    with torch.no_grad():
        fp32, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, m)
        with torch.autocast("cpu", torch.bfloat16):
            bf16, _ = policy.logprobs(prompt_ids, prompt_mask, out.response_ids, m)
    to_bf16 = (out.logprobs[m] - bf16[m].float()).abs().max().item()
    assert to_bf16 < 2e-3 and 2 * to_bf16 < (out.logprobs[m] - fp32[m]).abs().max().item()
