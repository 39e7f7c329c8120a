"""The update's forward never runs cuDNN's attention kernel (``gigpo_lab/training/attention_backends.py``): its
backward returns NaN on H100/H200 GPUs for masked rows of 64 mod 128 tokens (pytorch/pytorch#196678), the NaN
gradient of the lab's GPU run. The switch is global while inside ``sdpa_kernel``, so the CPU can check that the
Hugging Face policy's attention runs with it off during an update, and back on for the rollout."""

from __future__ import annotations

import torch

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import build
from tests.hf_tiny import build_tiny_hf_model


def test_a_hugging_face_update_runs_its_attention_without_cudnn_and_the_rollout_keeps_the_default(
    tiny_overrides, tmp_path
):
    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={build_tiny_hf_model(tmp_path / 'hf')}",
            "trainer.micro_batch_size=2",
        ]
    )
    module = build(cfg)
    seen: list[bool] = []
    attention = [m for name, m in module.policy.named_modules() if name.endswith("self_attn")]
    assert attention, "the tiny model has attention layers to watch"
    for layer in attention:
        layer.register_forward_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))

    batch, _ = module.collector.collect([0, 1], torch.Generator().manual_seed(0))
    assert seen and all(seen), "the rollout runs with PyTorch's default backends"
    module.score(batch)
    batch.advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(1))
    seen.clear()
    loss, _ = module.minibatch_loss(batch, torch.Tensor.backward)
    loss.backward()
    assert seen and not any(seen), "every attention call of the update ran with cuDNN's kernel excluded"
    assert torch.backends.cuda.cudnn_sdp_enabled(), "the switch is restored after the update"
    grads = [p.grad for p in module.policy.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
