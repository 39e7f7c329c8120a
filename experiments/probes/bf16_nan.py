"""Probe for the GPU run's bf16 NaN (issue #61): the lab's own update under bf16-mixed on a random Qwen2 of
Qwen2-0.5B's layer shape, with non-zero advantages from the first iteration, on any device.

It runs ``gigpo-lab train`` in-process with experiments/gpu_check.sh's settings (the same micro-batches, loss and
options), with two changes: the advantages are replaced by N(0, 1) draws (seeded) so every minibatch has a
gradient from iteration 0, and hooks report the first non-finite tensor: every module's forward output, the
loss's parts, and each parameter's gradient in the order the backward pass produces them.

    python experiments/probes/bf16_nan.py --layers 4 --iterations 3            # CPU
    python experiments/probes/bf16_nan.py --layers 32 --accelerator gpu        # the GPU run's model

Prints one line per finding, and a last line ``probe: finite`` or ``probe: non-finite at ...``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


class FirstNonFinite:
    """Forward hooks on every submodule and gradient hooks on every parameter; remembers the first of each."""

    def __init__(self) -> None:
        self.forward: str | None = None
        self.grad: str | None = None
        self.iteration = -1

    def watch(self, model: torch.nn.Module) -> None:
        for name, sub in model.named_modules():
            sub.register_forward_hook(self._forward_hook(name or type(model).__name__))
        for name, param in model.named_parameters():
            if param.requires_grad:
                param.register_hook(self._grad_hook(name))

    def _forward_hook(self, name: str):
        def hook(_module, _inputs, output):
            tensor = output[0] if isinstance(output, tuple) else output
            if self.forward is None and torch.is_tensor(tensor) and tensor.is_floating_point():
                if not torch.isfinite(tensor).all():
                    self.forward = (
                        f"iteration {self.iteration}: forward output of {name} {tuple(tensor.shape)}"
                    )
                    print("probe:", self.forward, flush=True)

        return hook

    def _grad_hook(self, name: str):
        def hook(grad):
            if self.grad is None and not torch.isfinite(grad).all():
                self.grad = f"iteration {self.iteration}: gradient of {name} (first in the backward pass)"
                print("probe:", self.grad, flush=True)
            return grad

        return hook


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--tiny", action="store_true", help="a 64-wide model: the script's plumbing only")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides")
    args = parser.parse_args()

    from hf_tiny import build_qwen2_half_b_shape

    import gigpo_lab.train as lab_train
    from gigpo_lab.config_paths import compose_config

    out = args.out or Path(tempfile.mkdtemp(prefix="bf16_nan_"))
    model = build_qwen2_half_b_shape(out / "model", args.layers, args.tiny)
    cfg = compose_config(
        [
            "model=hf",
            f"model.path={model}",
            "lightning=gpu",
            f"lightning.accelerator={args.accelerator}",
            f"lightning.precision={args.precision}",
            f"trainer.iterations={args.iterations}",
            f"trainer.eval_every={args.iterations + 1}",
            "trainer.checkpoint_every=100",
            "lightning.progress_bar=false",
            "trainer.micro_batch_size=16",
            "trainer.optimizer.lr=1e-6",
            "trainer.minibatch_size=64",
            "trainer.ppo_epochs=1",
            "rollout.groups=4",
            "rollout.group_size=8",
            "rollout.max_new_tokens=16",
            "rollout.eval_episodes=8",
            "rollout.eval_greedy_episodes=4",
            "env.max_turns=4",
            f"output_dir={out / 'run'}",
            f"tracking.uri=sqlite:///{out / 'mlflow.db'}",
            "tracking.log_checkpoint=false",
            *args.overrides,
        ]
    )
    probe = FirstNonFinite()
    build = lab_train.build

    def probed_build(cfg, loop=None):
        module = build(cfg, loop)
        probe.watch(module.policy)
        estimator = module.estimator
        draws = torch.Generator().manual_seed(0)

        def forced(batch):
            probe.iteration += 1
            result = estimator(batch)
            advantages = torch.randn(len(batch), generator=draws).to(result.advantages.dtype)
            return dataclasses.replace(result, advantages=advantages)

        module.estimator = forced
        return module

    lab_train.build = probed_build
    try:
        metrics = lab_train.train(cfg)
    except FloatingPointError as err:
        print("probe: the run stopped:", err, flush=True)
        metrics = {}
    for key in ("train/loss", "train/grad_norm", "train/pg_loss"):
        if key in metrics:
            print(f"probe: last {key} = {metrics[key]}")
    found = probe.forward or probe.grad
    print(f"probe: non-finite at {found}" if found else "probe: finite", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
