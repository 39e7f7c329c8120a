"""estimator=ppo in real training runs: the critic trains beside the policy, its head is checkpointed, and a
policy that cannot carry a head is refused before any rollout."""

from __future__ import annotations

import pytest
from real_runs import history, policy_state, run_cfg
from tiny_sizes import MOVES_AT_ONCE

from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.policy.base import Policy
from gigpo_lab.policy.tiny import TinyPolicy
from gigpo_lab.train import train


def test_a_tiny_ppo_run_trains_the_policy_and_its_critic(tiny_overrides, tmp_path):
    cfg = run_cfg(tiny_overrides, tmp_path, "ppo", "estimator=ppo", MOVES_AT_ONCE)
    metrics = train(cfg)
    uri = f"sqlite:///{tmp_path / 'ppo'}.db"
    losses = history(uri, "train/value_loss")
    assert [step for step, _ in losses] == [0, 1] and all(v > 0 for _, v in losses)
    values = history(uri, "adv/value_mean")
    assert values[0][1] == 0.0, "the head starts at zero"
    assert values[1][1] != 0.0, "after one update the critic predicts something"
    assert abs(metrics["adv/mean"]) < 1e-6, "whitened advantages"
    state = policy_state(tmp_path / "ppo" / "checkpoints" / "last.ckpt")
    assert float(state["policy.value_head.weight"].abs().sum()) > 0
    assert not any(k.startswith("reference.") for k in state)  # loss.kl_coef=0: no reference at all


def test_a_ppo_run_resumes_with_its_head(tiny_overrides, tmp_path):
    """A checkpoint of a ppo run holds the head, and resuming from it loads it (strict)."""
    first = run_cfg(tiny_overrides, tmp_path, "a", "estimator=ppo", "trainer.iterations=1")
    train(first)
    ckpt = tmp_path / "a" / "checkpoints" / "last.ckpt"
    resumed = run_cfg(tiny_overrides, tmp_path, "a", "estimator=ppo", f"ckpt_path={ckpt}")
    train(resumed)
    assert "policy.value_head.bias" in policy_state(ckpt)


class OpaquePolicy(TinyPolicy):
    """A policy that exposes no hidden state (as a user's own policy class might)."""

    prompt_hidden = Policy.prompt_hidden


def build_opaque_policy(vocabulary, **kwargs):
    tiny = build_tiny_policy(vocabulary, **kwargs)
    tiny.__class__ = OpaquePolicy
    return tiny


def test_ppo_on_a_policy_without_a_hidden_state_fails_before_any_rollout(tiny_overrides, tmp_path):
    cfg = run_cfg(
        tiny_overrides,
        tmp_path,
        "opaque",
        "estimator=ppo",
        "model._target_=tests.training.test_ppo_run.build_opaque_policy",
    )
    with pytest.raises(ValueError, match=r"estimator=ppo needs a value head .* use model=tiny or model=hf"):
        train(cfg)
    assert not (tmp_path / "opaque" / "checkpoints").exists()  # nothing ran
