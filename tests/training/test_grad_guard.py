"""The non-finite-gradient guard names the parameter whose gradient turned non-finite first in the backward pass
(``gigpo_lab/training/grad_guard.py``)."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from gigpo_lab.training.grad_guard import GradientWatch


def _three_layers() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))


def test_the_watch_names_the_first_non_finite_gradient_in_backward_order_not_registration_order():
    """A NaN injected into the gradient that flows between layers 1 and 2 reaches layer 1's parameters first and
    layer 0's after; layer 2's stay finite. The first in registration order (layer 0) would be the wrong answer."""
    model = _three_layers()
    watch = GradientWatch(model.named_parameters())
    x = torch.randn(3, 4)
    hidden = model[1](model[0](x))
    hidden.register_hook(lambda g: torch.full_like(g, float("nan")))
    watch.counted(torch.Tensor.backward)(model[2](hidden).sum())
    assert torch.isfinite(model[2].weight.grad).all() and not torch.isfinite(model[0].weight.grad).all()
    assert watch.first_non_finite().split("'s")[0] in ("1.weight", "1.bias")
    assert "backward call 1 " in watch.first_non_finite()


def test_the_watch_counts_micro_batches_and_forgets_on_reset():
    model = _three_layers()
    watch = GradientWatch(model.named_parameters())
    backward = watch.counted(torch.Tensor.backward)
    backward(model(torch.randn(2, 4)).sum())  # a finite first micro-batch
    assert watch.first_non_finite() is None

    def second(nan: bool) -> torch.Tensor:  # a NaN only in the gradient that reaches layer 0
        first = model[0](torch.randn(2, 4))
        if nan:
            first.register_hook(lambda g: torch.full_like(g, float("nan")))
        return model[2](model[1](first)).sum()

    backward(second(nan=True))
    assert watch.first_non_finite() in (
        f"0.{name}'s (in backward call 2 of the optimizer step)" for name in ("weight", "bias")
    )
    watch.reset()
    assert watch.first_non_finite() is None
    watch.remove()
    backward(second(nan=True))
    assert watch.first_non_finite() is None  # no hooks: nothing recorded, and no .grad scan was asked for


def test_without_hook_flags_the_grads_are_scanned_in_reverse_order():
    """fsdp's sharded gradients are written without autograd hooks: the fallback scans ``.grad``, last layer
    first."""
    model = _three_layers()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    model[0].weight.grad[0, 0] = float("nan")
    model[1].bias.grad[0] = float("nan")
    watch = GradientWatch([])
    assert watch.first_non_finite(model.named_parameters()).startswith("1.bias's")


class NaNGradientOnRankOne(L.Callback):
    """On rank 1 only, the first trainable weight's local gradient becomes NaN (before DDP's all-reduce)."""

    def on_train_start(self, trainer, pl_module):
        if trainer.global_rank == 1:
            weight = next(p for p in pl_module.policy.parameters() if p.requires_grad)
            weight.register_hook(lambda g: torch.full_like(g, float("nan")))


@pytest.mark.slow  # two spawned ranks, about 30 s
def test_under_ddp_the_guard_names_the_rank_and_parameter_where_the_gradient_turned_non_finite(
    tiny_overrides, tmp_path
):
    """After the all-reduce every rank holds the NaN; the guard's hooks saw each rank's own gradient before it,
    so the error names rank 1 and its parameter, on every rank."""
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import build
    from tests.training.test_ddp import two_rank_trainer

    module = build(compose_config([*tiny_overrides, "trainer.minibatch_size=0", "trainer.eval_every=0"]))
    name = next(n for n, p in module.policy.named_parameters() if p.requires_grad)
    trainer = two_rank_trainer(tmp_path, 1, NaNGradientOnRankOne())
    with pytest.raises(
        Exception, match=rf"first non-finite gradient of the backward pass is rank 1: {name}'s"
    ):
        trainer.fit(module)


def test_the_guard_says_so_when_no_gradient_was_seen_non_finite():
    from gigpo_lab.training.grad_guard import UNSEEN, first_culprit_across_ranks

    assert first_culprit_across_ranks(None, None) == UNSEEN
    assert first_culprit_across_ranks("w's", None) == "w's"
