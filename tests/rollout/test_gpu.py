"""The engine and collector with the policy on a CUDA device (``pytest -m gpu``; skipped without CUDA).

Prompts, generators and the returned batch stay on the CPU; only the model lives on the GPU.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.envs import make_env
from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy import build_hf_policy, build_tiny_policy
from gigpo_lab.rollout import SamplingParams, TorchEngine
from gigpo_lab.rollout.collector import Collector

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def frozenlake():
    return make_env("gigpo_lab/FrozenLake-v0", max_turns=6, random_map=True)


def prompts(policy, n: int):
    env = frozenlake()
    rows = []
    for i in range(n):
        obs, info = env.reset(seed=i // 4)
        rows.append(policy.build_prompt(obs, info["anchor"], []))
    return left_pad(rows, policy.tokenizer.pad_id)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"), hidden_size=128, num_heads=2, num_kv_heads=1)


@pytest.mark.parametrize("kind", ["tiny", "hf"])
def test_engine_on_cuda_matches_policy_logprobs(kind, hf_dir):
    if kind == "tiny":
        policy = build_tiny_policy(frozenlake().unwrapped.vocabulary(), d_model=64)
    else:
        policy = build_hf_policy(str(hf_dir))
    policy = policy.cuda()
    prompt_ids, prompt_mask = prompts(policy, 16)
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=12))
    a = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
    b = engine.generate(prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0))
    assert a.response_ids.device.type == "cpu" and torch.equal(a.response_ids, b.response_ids)
    with torch.no_grad():
        logp, _ = policy.logprobs(
            prompt_ids.cuda(), prompt_mask.cuda(), a.response_ids.cuda(), a.response_mask.cuda()
        )
    torch.testing.assert_close(a.logprobs, logp.cpu(), atol=1e-4, rtol=0)
    plain = TorchEngine(policy, SamplingParams(max_new_tokens=12), prefill="plain")
    greedy = engine.generate(prompt_ids, prompt_mask, greedy=True)
    assert torch.equal(greedy.response_ids, plain.generate(prompt_ids, prompt_mask, greedy=True).response_ids)


def test_bfloat16_hf_policy_generates(hf_dir):
    policy = build_hf_policy(str(hf_dir), dtype="bfloat16").cuda()
    prompt_ids, prompt_mask = prompts(policy, 8)
    out = TorchEngine(policy, SamplingParams(max_new_tokens=8)).generate(prompt_ids, prompt_mask)
    assert out.logprobs.dtype == torch.float32 and torch.isfinite(out.logprobs).all()


def test_collector_with_a_cuda_policy_returns_a_cpu_batch():
    policy = build_tiny_policy(frozenlake().unwrapped.vocabulary(), d_model=64).cuda()
    engine = TorchEngine(policy, SamplingParams(max_new_tokens=1))
    collector = Collector(partial(frozenlake), policy, engine, groups=4, group_size=4)
    batch, metrics = collector.collect([0, 1, 2, 3], torch.Generator().manual_seed(0))
    assert batch.prompt_ids.device.type == "cpu" and batch.old_logprobs.device.type == "cpu"
    assert metrics["rollout/env_steps"] == len(batch)
    assert {"eval/success_rate", "eval/return", "eval/length"} <= set(
        collector.evaluate(range(4), torch.Generator(), greedy=False, temperature=0.4)
    )
