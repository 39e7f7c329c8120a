"""LoRA on the HF policy: only adapters train, the reference is the base with adapters disabled (no copy),
merged weights equal peft's own merge, and a LoRA run trains end to end."""

from __future__ import annotations

import copy

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.algorithm.loss import PolicyLoss
from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy import build_hf_policy
from gigpo_lab.policy.lora import AdapterFreeReference, LoraSettings
from gigpo_lab.train import train
from gigpo_lab.training.module import GiGPOModule
from gigpo_lab.training.schema import TrainerConfig

LORA = {
    "enabled": True,
    "r": 4,
    "alpha": 8,
    "dropout": 0.0,
    "target_modules": ["q_proj", "v_proj", "up_proj"],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


def _rows(policy, n: int = 3):
    """n prompt/response rows with different lengths (left/right padding exercised)."""
    prompts = [policy.build_prompt(f"S F {'F ' * i}G", "", []) for i in range(n)]
    responses = [policy.tokenizer.encode("<action>" + "up " * (i + 1) + "</action>") for i in range(n)]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    pad = policy.tokenizer.pad_id
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[False] * (width_p - len(p)) + [True] * len(p) for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    response_mask = torch.tensor([[True] * len(r) + [False] * (width_r - len(r)) for r in responses])
    return prompt_ids, prompt_mask, response_ids, response_mask


def _perturb_adapters(policy, scale: float = 0.5) -> None:
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for name, p in policy.named_parameters():
            if ".lora_" in name:
                p.add_(scale * torch.randn_like(p))


def test_only_adapters_train_and_the_wrapped_model_starts_equal_to_the_base(model_dir):
    base = build_hf_policy(str(model_dir))
    policy = build_hf_policy(str(model_dir), lora=LORA)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj", "up_proj"}
    rows = _rows(policy)
    torch.testing.assert_close(policy.logprobs(*rows)[0], base.logprobs(*rows)[0])  # B = 0 at init
    assert policy.build_args["lora"]["r"] == 4 and policy.lora_enabled and not base.lora_enabled


def test_reference_is_the_base_with_adapters_disabled_and_no_copy(model_dir):
    base = build_hf_policy(str(model_dir))
    policy = build_hf_policy(str(model_dir), lora=LORA)
    reference = policy.make_reference()
    assert isinstance(reference, AdapterFreeReference) and not isinstance(reference, torch.nn.Module)
    _perturb_adapters(policy)
    rows = _rows(policy)
    policy.eval()
    trained, _ = policy.logprobs(*rows)
    ref, _ = reference.logprobs(*rows)
    torch.testing.assert_close(ref, base.logprobs(*rows)[0])
    assert not torch.allclose(trained, ref), "the adapters changed the policy, not the reference"
    # the adapters are back on after the block
    torch.testing.assert_close(policy.logprobs(*rows)[0], trained)


def test_module_keeps_no_second_copy_with_lora_and_a_deep_copy_without(model_dir):
    loss = PolicyLoss(kl_coef=0.01)
    for lora, expect_copy in ((LORA, False), (None, True)):
        policy = build_hf_policy(str(model_dir), lora=lora)
        module = GiGPOModule(policy, None, loss, None, None, TrainerConfig(optimizer=torch.optim.AdamW))
        has_reference_weights = any(k.startswith("reference.") for k in module.state_dict())
        assert has_reference_weights == expect_copy
        n_params = sum(p.numel() for p in module.parameters())
        assert n_params == (2 if expect_copy else 1) * sum(p.numel() for p in policy.parameters())


def test_adapters_disabled_refuses_a_policy_without_adapters(model_dir):
    policy = build_hf_policy(str(model_dir))
    with pytest.raises(NotImplementedError, match="no LoRA adapters"), policy.adapters_disabled():
        pass


def test_merged_weights_equal_peft_merge_and_give_the_same_logits(model_dir):
    from transformers import AutoModelForCausalLM

    policy = build_hf_policy(str(model_dir), lora=LORA)
    _perturb_adapters(policy)
    merged = policy.hf_state_dict()
    reference = copy.deepcopy(policy.model).merge_and_unload().state_dict()
    assert set(merged) == set(reference)
    for key, value in reference.items():
        torch.testing.assert_close(merged[key], value, msg=key)
    plain = AutoModelForCausalLM.from_pretrained(model_dir)
    plain.load_state_dict(merged)
    policy.eval()
    ids = torch.tensor([policy.build_prompt("S F G", "", [])])
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, policy.model(input_ids=ids).logits)
    assert any(".lora_" in n for n, _ in policy.named_parameters()), "the policy itself stays unmerged"


@pytest.mark.parametrize(
    "targets", [LORA["target_modules"], ["q_proj", "embed_tokens"]], ids=["linear", "with-embeddings"]
)
def test_merged_adapters_compute_the_same_logits_and_restore_every_weight_bit_for_bit(model_dir, targets):
    """Inside ``merged_weights`` the policy is its merged function (logits within 1e-5 of adapters on, and the
    adapters are off); afterwards every tensor is the very one it was, also when the block raises. Adapted
    embeddings are merged too (peft keeps their adapters apart from the linear layers')."""
    policy = build_hf_policy(str(model_dir), lora={**LORA, "target_modules": targets})
    _perturb_adapters(policy)
    policy.eval()

    def tensors():
        return {k: v for k, v in policy.state_dict().items() if isinstance(v, torch.Tensor)}

    before = {k: (v.data_ptr(), v.clone()) for k, v in tensors().items()}
    ids = torch.tensor([policy.build_prompt("S F G", "", [])])
    with torch.no_grad():
        adapted = policy.model(input_ids=ids).logits
        with policy.adapters_disabled():
            base = policy.model(input_ids=ids).logits
        with policy.merged_weights():
            merged = policy.model(input_ids=ids).logits
            moved = [k for k, v in tensors().items() if not torch.equal(v, before[k][1])]
    assert (adapted - base).abs().max() > 1e-3, "the perturbed adapters change the output"
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=0)
    assert {k.split(".base_layer")[0].rsplit(".", 1)[-1] for k in moved} == set(targets)
    with pytest.raises(RuntimeError, match="inside"), policy.merged_weights():
        raise RuntimeError("inside the block")
    for key, value in tensors().items():
        assert value.data_ptr() == before[key][0] and torch.equal(value, before[key][1]), key
    with torch.no_grad():
        assert torch.equal(policy.model(input_ids=ids).logits, adapted), "the adapters are on again"


@pytest.mark.parametrize(
    ("lora", "match"),
    [
        ({"enabled": True, "rank": 4}, "unknown keys"),
        ({"enabled": True, "r": 0}, "r=0"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_bad_lora_settings_are_refused(lora, match):
    with pytest.raises(ValueError, match=match):
        LoraSettings.from_config(lora)


def test_lora_run_trains_only_adapters(model_dir, tiny_overrides, tmp_path):
    """One iteration of model=hf with LoRA and a KL term: adapters move, base weights are bit-identical."""
    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={model_dir}",
            "model.lora.enabled=true",
            "model.lora.r=4",
            "trainer.iterations=1",
            "trainer.optimizer.lr=0.01",
            "rollout.max_new_tokens=4",
            "loss.kl_coef=0.1",
            "loss.entropy_coef=0.01",  # a gradient even when every advantage is 0 (the random model never wins)
        ]
    )
    metrics = train(cfg)
    assert "train/kl" in metrics and torch.isfinite(torch.tensor(metrics["train/loss"]))
    state = torch.load(tmp_path / "out" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)[
        "state_dict"
    ]
    assert not any(k.startswith("reference.") for k in state)
    lora = {**LORA, "r": 4, "alpha": 16, "target_modules": "all-linear", "seed": 0}
    initial = build_hf_policy(str(model_dir), lora=lora).state_dict()  # the run's initialisation, exactly
    final = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
    assert set(initial) == set(final)
    moved = {k for k in initial if k != "_extra_state" and not torch.equal(initial[k], final[k])}
    assert any(".lora_B." in k for k in moved) and all(".lora_" in k for k in moved)


def test_adapter_initialisation_follows_the_seed_and_leaves_the_global_rng(model_dir):
    state = torch.random.get_rng_state()
    a, b, c = (build_hf_policy(str(model_dir), lora={**LORA, "seed": s}).state_dict() for s in (0, 0, 1))
    assert torch.equal(torch.random.get_rng_state(), state)
    key = next(k for k in a if ".lora_A." in k)
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


@pytest.mark.parametrize("lora", [False, True])
def test_module_tensors_are_the_state_dict_without_its_hooks(model_dir, lora):
    """What the engines sync from (``hf_state_dict``) is read without state-dict hooks (under FSDP2 they would
    reshard gathered weights), and it is the state dict: the same names in the same order, the same tensors."""
    from gigpo_lab.policy.lora import module_tensors

    model = build_hf_policy(str(model_dir), lora={**LORA, "r": 4} if lora else None).model
    got, want = module_tensors(model), model.state_dict()
    assert list(got) == list(want)
    assert all(got[k].data_ptr() == want[k].data_ptr() for k in want)
