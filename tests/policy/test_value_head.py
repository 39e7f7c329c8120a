"""The critic's value head (estimator=ppo): where it reads, who owns it, what trains, and that the reference
never has one."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.algorithm import build_estimator
from gigpo_lab.algorithm.loss import PolicyLoss
from gigpo_lab.policy import build_hf_policy, build_tiny_policy
from gigpo_lab.policy.base import Policy
from gigpo_lab.training.module import GiGPOModule
from gigpo_lab.training.schema import TrainerConfig

LORA = {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
VOCAB = ["S", "F", "H", "G", "up", "down", "left", "right"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


def _module(policy, estimator="ppo", kl_coef=0.01):
    loop = TrainerConfig(optimizer=torch.optim.AdamW)
    return GiGPOModule(policy, build_estimator(estimator), PolicyLoss(kl_coef=kl_coef), None, None, loop)


def _prompts(policy, texts):
    ids = [policy.build_prompt(t, t, []) for t in texts]
    width = max(map(len, ids)) + 2  # every row has left padding
    pad = policy.tokenizer.pad_id
    prompt_ids = torch.tensor([[pad] * (width - len(p)) + p for p in ids])
    prompt_mask = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in ids])
    return prompt_ids, prompt_mask


def test_only_an_estimator_with_a_critic_adds_a_head_and_the_reference_has_none():
    for name, critic in (("ppo", True), ("gigpo", False), ("grpo", False)):
        policy = build_tiny_policy(VOCAB, d_model=32, n_layers=1, n_heads=2)
        before = {k: v.clone() for k, v in policy.state_dict().items()}
        module = _module(policy, name)
        assert policy.has_value_head is critic and module.critic is critic
        keys = set(module.state_dict())
        assert any(k.startswith("policy.value_head.") for k in keys) is critic
        assert not any(k.startswith("reference.value_head") for k in keys), "the reference is critic-free"
        assert not module.reference.has_value_head
        # the head is new and zero: nothing the policy had changes
        assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items() if k in before)
    # a reference made after the head exists drops it too
    policy = build_tiny_policy(VOCAB, d_model=32, n_layers=1, n_heads=2)
    policy.add_value_head()
    assert not policy.make_reference().has_value_head and policy.has_value_head


def test_the_head_joins_the_optimizer_of_the_policy():
    policy = build_tiny_policy(VOCAB, d_model=32, n_layers=1, n_heads=2)
    module = _module(policy)
    optimized = {id(p) for group in module.configure_optimizers().param_groups for p in group["params"]}
    assert {id(p) for p in policy.value_head.parameters()} <= optimized


def test_tiny_value_reads_the_last_prompt_token_whatever_the_padding():
    policy = build_tiny_policy(VOCAB, d_model=32, n_layers=1, n_heads=2)
    head = policy.add_value_head()
    torch.nn.init.normal_(head.weight)
    ids, mask = _prompts(policy, ["S F", "S F H G", "G"])
    values = policy.values(ids, mask)
    assert values.shape == (3,)
    for i in range(3):  # each row alone, without padding
        alone = ids[i][mask[i]][None], mask[i][mask[i]][None]
        torch.testing.assert_close(values[i : i + 1], policy.values(*alone), rtol=1e-5, atol=1e-6)
    hidden = policy.model.last_hidden(ids, mask)
    logits, _ = policy.model(ids, mask, logits_to_keep=1)
    torch.testing.assert_close(logits[:, -1], hidden @ policy.model.tok_emb.weight.T, rtol=1e-5, atol=1e-5)


def test_hf_value_reads_the_backbone_at_the_last_prompt_token(model_dir):
    policy = build_hf_policy(str(model_dir))
    head = policy.add_value_head()
    torch.nn.init.normal_(head.weight)
    ids, mask = _prompts(policy, ["S F F G", "S F"])
    values = policy.values(ids, mask)
    assert values.shape == (2,)
    alone = ids[1][mask[1]][None], mask[1][mask[1]][None]
    torch.testing.assert_close(values[1:], policy.values(*alone), rtol=1e-4, atol=1e-5)
    assert policy.hidden_size == head.in_features


def test_with_lora_only_the_adapters_and_the_head_train_and_the_reference_is_critic_free(model_dir):
    policy = build_hf_policy(str(model_dir), lora=LORA)
    module = _module(policy)
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    assert any(n.startswith("policy.value_head.") for n in trainable)
    assert all(".lora_" in n or n.startswith("policy.value_head.") for n in trainable), trainable
    ids, mask = _prompts(policy, ["S F F G", "S F"])
    policy.values(ids, mask).sum().backward()
    grads = {n for n, p in policy.named_parameters() if p.grad is not None}
    assert "value_head.weight" in grads and all(".lora_" in n or n.startswith("value_head.") for n in grads)
    reference = module.reference  # the adapter-free view of the same module: it only scores log-probs
    assert not hasattr(reference, "values") and not isinstance(reference, torch.nn.Module)


def test_a_policy_without_a_hidden_state_is_refused_in_one_sentence():
    class Opaque(Policy):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

    with pytest.raises(ValueError, match="needs a value head.*Opaque.*model=tiny"):
        _module(Opaque(), kl_coef=0.0)
    assert not Opaque().can_serve_value_head and build_tiny_policy(VOCAB, d_model=32).can_serve_value_head
