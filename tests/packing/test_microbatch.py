"""Micro-batched scoring and updates (gigpo_lab/packing/microbatch.py) compute what one whole-minibatch pass
computes, on a tiny HF model in float32: log-probs, losses, metrics and gradients within 1e-5; a real Lightning
run ends with the same weights; and the chunked paths hold less memory at their peak."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
from hf_tiny import build_tiny_hf_model
from hypothesis import given, settings
from hypothesis import strategies as st
from row_batches import grads, minibatch, pad_rows
from torch.profiler import ProfilerActivity, profile

from gigpo_lab.algorithm.loss import AGGREGATIONS, PolicyLoss
from gigpo_lab.batch import StepBatch
from gigpo_lab.packing.microbatch import (
    chunked_logprobs,
    distinct_rows,
    length_sorted_chunks,
    microbatched_loss,
    trim_padding,
)
from gigpo_lab.policy import build_hf_policy

TOL = {"rtol": 0.0, "atol": 1e-5}
N_ROWS = 7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"), hidden_size=64, num_layers=2)


def _batch(policy, n: int = N_ROWS, seed: int = 0) -> StepBatch:
    """n rows of very different prompt and response lengths, with advantages and old/ref log-probs; rows 1 and
    n-1 repeat row 0's prompt and response (as the envs of a group often do), with their own advantages."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [policy.build_prompt("S F " + "F H " * (3 * i % 11), "", []) for i in range(n)]
    responses = [policy.tokenizer.encode("<action>" + "up " * (1 + 5 * i % 7)) for i in range(n)]
    for i in (1, n - 1):
        prompts[i], responses[i] = prompts[0], responses[0]
    return minibatch(policy, pad_rows(prompts, responses, policy.tokenizer.pad_id), gen)


# ----------------------------------------------------------------------------- padding and chunks
@settings(max_examples=50, deadline=None)
@given(
    prompt_lens=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    response_lens=st.lists(st.integers(0, 5), min_size=6, max_size=6),
    extra=st.tuples(st.integers(0, 3), st.integers(0, 3)),
)
def test_trimming_drops_only_columns_that_are_padding_in_every_row(prompt_lens, response_lens, extra):
    n = len(prompt_lens)
    prompts = [list(range(1, k + 1)) for k in prompt_lens]
    responses = [list(range(1, k + 1)) for k in response_lens[:n]]
    p_ids, p_mask, r_ids, r_mask = pad_rows(prompts, [r or [0] for r in responses], 0)
    r_mask = r_mask & torch.tensor([[bool(r)] for r in responses])
    # extra all-padding columns on the outside of both
    p_ids, p_mask = (
        torch.nn.functional.pad(p_ids, (extra[0], 0)),
        torch.nn.functional.pad(p_mask, (extra[0], 0)),
    )
    r_ids, r_mask = (
        torch.nn.functional.pad(r_ids, (0, extra[1])),
        torch.nn.functional.pad(r_mask, (0, extra[1])),
    )
    tp_ids, tp_mask, tr_ids, tr_mask = trim_padding(p_ids, p_mask, r_ids, r_mask)
    assert tp_mask[:, 0].any() and tp_mask.shape[1] == max(prompt_lens)
    assert torch.equal(tp_ids[tp_mask], p_ids[p_mask]) and torch.equal(tr_ids[tr_mask], r_ids[r_mask])
    assert tr_mask.shape[1] >= 1 and (tr_mask[:, -1].any() or not r_mask.any())


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=12), size=st.integers(-1, 13))
def test_chunks_cover_every_row_once_shortest_first(lengths, size):
    mask = torch.arange(20)[None, :] < torch.tensor(lengths)[:, None]
    chunks = length_sorted_chunks(mask, torch.zeros_like(mask[:, :1]), size)
    order = torch.cat(chunks)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    assert all(len(c) <= size for c in chunks) if size > 0 else len(chunks) == 1
    assert torch.tensor(lengths)[order].diff().ge(0).all()


def test_distinct_rows_index_back_to_every_row(model_dir):
    policy = build_hf_policy(str(model_dir))
    batch = _batch(policy)
    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    first, inverse = distinct_rows(cols)
    assert len(first) == N_ROWS - 2 and first[inverse[1]] == first[inverse[N_ROWS - 1]] == 0
    for c in cols:
        assert torch.equal(c[first][inverse], c)


# ----------------------------------------------------------------------------- numerics: old path = new path
@pytest.mark.parametrize("size", [1, 2, 3, N_ROWS, 100])
@pytest.mark.parametrize("lora", [False, True])
def test_chunked_scoring_equals_one_whole_pass(model_dir, size, lora):
    policy = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4} if lora else None).eval()
    batch = _batch(policy)
    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    scorers = [policy, policy.make_reference()]  # with LoRA the reference is the adapter-free base
    for scorer in scorers:
        with torch.no_grad():
            whole = scorer.logprobs(*cols, temperature=0.7)
        chunked = chunked_logprobs(scorer, cols, size, 0.7, policy.device)
        for new, old in zip(chunked, whole, strict=True):  # log-probs, entropies
            assert new.dtype == torch.float32 and new.shape == old.shape
            torch.testing.assert_close(new, old, **TOL)
            assert torch.equal(new[~batch.response_mask], torch.zeros_like(new[~batch.response_mask]))


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize(("size", "distinct"), [(1, True), (3, True), (3, False)])
def test_micro_batched_loss_and_gradients_equal_the_whole_minibatch(model_dir, aggregation, size, distinct):
    """Loss, every logged part and every parameter's gradient, with KL and entropy terms on; repeated rows once
    (``distinct``) or each on its own."""
    policy = build_hf_policy(str(model_dir))
    batch = _batch(policy)
    loss_fn = PolicyLoss(
        aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01, clip_low=0.05, clip_high=0.05
    )
    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)

    policy.zero_grad(set_to_none=True)
    logp, entropy = policy.logprobs(*cols, temperature=0.7)
    whole = loss_fn(
        logp, batch.old_logprobs, batch.advantages, batch.response_mask, entropy, batch.ref_logprobs
    )
    whole.loss.backward()
    whole_grads = grads(policy)

    policy.zero_grad(set_to_none=True)
    last, micro = microbatched_loss(
        policy, loss_fn, batch, size, 0.7, torch.Tensor.backward, distinct=distinct
    )
    last.backward()
    assert 0.0 < float(whole.clipfrac) < 1.0  # the clip is active on some tokens, not all
    for key in ("loss", "pg_loss", "kl", "entropy", "clipfrac", "approx_kl"):
        torch.testing.assert_close(getattr(micro, key).float(), getattr(whole, key).float(), **TOL)
    torch.testing.assert_close(grads(policy), whole_grads, **TOL)


def test_micro_batching_in_a_lightning_run_ends_with_the_same_weights(model_dir):
    """One iteration (rollout, scoring, 2 x 2 minibatches, clipping, SGD) through a real Trainer, with and without
    micro-batches: the same rows, the same logged losses and the same weights after it."""
    from gigpo_lab.algorithm import GiGPO
    from gigpo_lab.envs import make_env
    from gigpo_lab.rollout import build_torch_engine
    from gigpo_lab.rollout.collector import Collector
    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.training.module import GiGPOModule
    from gigpo_lab.training.schema import TrainerConfig

    def run(micro_batch_size: int):
        env_fn = partial(make_env, id="gigpo_lab/FrozenLake-v0", max_turns=3, random_map=True)
        policy = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4, "seed": 3})
        engine = build_torch_engine(policy, max_new_tokens=4)
        module = GiGPOModule(
            policy,
            GiGPO(),
            PolicyLoss(kl_coef=0.05, entropy_coef=0.01),
            Collector(env_fn, policy, engine, groups=2, group_size=2),
            engine,
            TrainerConfig(
                # linear in the gradients (AdamW's g / sqrt(v) amplifies rounding)
                optimizer=partial(torch.optim.SGD, lr=0.5),
                ppo_epochs=2,
                minibatch_size=6,
                eval_every=0,
                sample_every=0,
                distinct_rows=False,
                micro_batch_size=micro_batch_size,
            ),
        )
        logger = IterationLogger(None)
        trainer = L.Trainer(
            max_epochs=1,
            accelerator="cpu",
            callbacks=[logger],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        L.seed_everything(0, verbose=False)
        trainer.fit(module)
        (_, metrics), *_ = logger.history
        return metrics, {k: v.detach().clone() for k, v in policy.named_parameters() if v.requires_grad}

    (m_whole, w_whole), (m_micro, w_micro) = run(0), run(2)
    assert m_whole["rollout/env_steps"] == m_micro["rollout/env_steps"] >= 8
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/grad_norm"):
        assert m_micro[key] == pytest.approx(m_whole[key], abs=1e-5), key
    assert any(
        w.abs().max() > 0 for k, w in w_whole.items() if "lora_B" in k
    )  # B starts at 0: the step moved it
    for key in w_whole:
        torch.testing.assert_close(w_micro[key], w_whole[key], **TOL)


# ----------------------------------------------------------------------------- memory
def profiled_peak_bytes(fn) -> int:
    """The peak of live CPU tensor memory while ``fn`` runs: the profiler's per-op allocations and frees (and
    the frees outside ops, its "[memory]" events) summed in time order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def test_chunked_scoring_and_micro_batches_hold_less_memory_at_their_peak(model_dir):
    policy = build_hf_policy(str(model_dir))
    batch = _batch(policy, n=12)
    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    loss_fn = PolicyLoss()

    def whole_score():
        with torch.no_grad():
            policy.logprobs(*cols)

    def whole_update():
        policy.zero_grad(set_to_none=True)
        logp, entropy = policy.logprobs(*cols)
        loss_fn(logp, batch.old_logprobs, batch.advantages, batch.response_mask, entropy).loss.backward()

    def micro_update():
        policy.zero_grad(set_to_none=True)
        last, _ = microbatched_loss(policy, loss_fn, batch, 2, 1.0, torch.Tensor.backward)
        last.backward()

    whole_score = profiled_peak_bytes(whole_score)
    chunk_score = profiled_peak_bytes(lambda: chunked_logprobs(policy, cols, 2, 1.0, policy.device))
    whole_update, micro_update = profiled_peak_bytes(whole_update), profiled_peak_bytes(micro_update)
    assert 0 < chunk_score < whole_score / 2
    assert 0 < micro_update < whole_update / 2


# ----------------------------------------------------------------------------- old log-probs from the rollout
def test_the_torch_engines_sampling_logprobs_are_the_rescored_old_logprobs(model_dir):
    """What ``trainer.reuse_rollout_logprobs`` keeps: the torch engine's log-probs of the sampled tokens equal
    a scoring pass over the collected rows (at the sampling temperature); a nucleus engine is refused."""
    from gigpo_lab.algorithm import GiGPO
    from gigpo_lab.envs import make_env
    from gigpo_lab.rollout import build_torch_engine
    from gigpo_lab.rollout.collector import Collector
    from gigpo_lab.training.module import GiGPOModule
    from gigpo_lab.training.schema import TrainerConfig

    policy = build_hf_policy(str(model_dir))
    engine = build_torch_engine(policy, temperature=0.7, max_new_tokens=5)
    assert engine.samples_policy_logprobs
    env_fn = partial(make_env, id="gigpo_lab/FrozenLake-v0", max_turns=3, random_map=True)
    batch, _ = Collector(env_fn, policy, engine, groups=2, group_size=3).collect(
        [0, 1], torch.Generator().manual_seed(0)
    )
    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    assert batch.response_mask.sum() > len(batch)  # multi-token responses
    rescored, _ = chunked_logprobs(policy, cols, 0, 0.7, policy.device)
    torch.testing.assert_close(batch.old_logprobs, rescored, **TOL)

    nucleus = build_torch_engine(policy, temperature=0.7, top_p=0.9)
    with pytest.raises(ValueError, match="reuse_rollout_logprobs"):
        GiGPOModule(policy, GiGPO(), PolicyLoss(), None, nucleus, TrainerConfig(reuse_rollout_logprobs=True))
