"""HF policy options in a real train step: bf16/fp32 parameters, gradient checkpointing, the default reference."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from test_lora import LORA, _rows

from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy import build_hf_policy
from gigpo_lab.policy.lora import base_model
from gigpo_lab.train import train


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


def _grads(policy) -> dict[str, torch.Tensor]:
    """Gradients of the summed response log-probs (a train-mode forward + backward)."""
    policy.train()
    policy.zero_grad()
    logp, _ = policy.logprobs(*_rows(policy))
    logp.sum().backward()
    return {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(model_dir, lora):
    plain = build_hf_policy(str(model_dir), lora=lora)
    checkpointed = build_hf_policy(str(model_dir), lora=lora, gradient_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())  # the same adapters' initialisation
    assert base_model(checkpointed.model).is_activation_checkpointing
    assert not base_model(plain.model).is_activation_checkpointing
    expected, got = _grads(plain), _grads(checkpointed)
    assert expected and set(expected) == set(got)
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, msg=name)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dtype_is_the_parameters_dtype_and_a_train_step_is_finite(model_dir, dtype):
    policy = build_hf_policy(str(model_dir), dtype=dtype)
    assert {p.dtype for p in policy.parameters()} == {getattr(torch, dtype)}
    logp, entropy = policy.logprobs(*_rows(policy))
    assert logp.dtype == torch.float32 and entropy.dtype == torch.float32, "scores are float32 in any dtype"
    grads = _grads(policy)
    assert all(torch.isfinite(g).all() and g.dtype == getattr(torch, dtype) for g in grads.values())


@pytest.mark.parametrize(
    "options",
    [["model.dtype=bfloat16"], ["model.gradient_checkpointing=true"]],
    ids=["bf16", "gradient-checkpointing"],
)
def test_one_iteration_train_run(model_dir, tiny_overrides, tmp_path, options):
    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={model_dir}",
            "trainer.iterations=1",
            "rollout.max_new_tokens=4",
            "loss.entropy_coef=0.01",  # a gradient even when every advantage is 0 (the random model never wins)
            *options,
        ]
    )
    metrics = train(cfg)
    assert torch.isfinite(torch.tensor([metrics["train/loss"], metrics["train/grad_norm"]])).all()
    assert metrics["train/grad_norm"] > 0
    state = torch.load(tmp_path / "out" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    dtypes = {
        v.dtype for k, v in state["state_dict"].items() if k.startswith("policy.") and torch.is_tensor(v)
    }
    assert dtypes == {torch.bfloat16 if "model.dtype=bfloat16" in options else torch.float32}


def test_default_reference_is_a_frozen_copy(model_dir):
    policy = build_hf_policy(str(model_dir))
    reference = policy.make_reference()
    assert reference is not policy and not reference.training
    assert not any(p.requires_grad for p in reference.parameters())
    assert all(
        p.data_ptr() != q.data_ptr() for p, q in zip(policy.parameters(), reference.parameters(), strict=True)
    )


def test_response_prefix_opens_the_answer_in_the_prompt_and_in_past_turns(model_dir):
    policy = build_hf_policy(str(model_dir), response_prefix="<action>", history_window=1)
    text = policy.prompt_text("now", [("before", "up</action>")])
    assert text.endswith("<|im_start|>assistant\n<action>")
    assert "<|im_start|>assistant\n<action>up</action><|im_end|>" in text
    plain = build_hf_policy(str(model_dir), response_prefix="<action>", use_chat_template=False)
    assert plain.prompt_text("now", []).endswith("Observation:\nnow\nAction: <action>")
    assert build_hf_policy(str(model_dir)).prompt_text("now", []).endswith("assistant\n")
