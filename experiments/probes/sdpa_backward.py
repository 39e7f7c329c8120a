"""Settles the cause of the H200's bf16 NaN gradient (issue #61) in well under a minute of device time.

The suspect is cuDNN's attention backward (pytorch/pytorch#196678): NaN in the query gradient when a mask is
passed, the sequence is 64 mod 128 tokens long and a row's log-sum-exp is below about -88.7 (a fully masked,
left-padded row). The probe runs one forward and backward of a random 2-layer Qwen2 of Qwen2-0.5B's layer shape
(14 heads of 64, 2 KV heads) under bf16 autocast on a left-padded batch, for several padded lengths, three ways:

- ``default``: PyTorch's own choice of attention kernel (cuDNN first on H100/H200 when a mask is passed);
- ``update``: the lab's update context (``gigpo_lab.training.attention_backends.update_attention``: no cuDNN);
- ``cudnn``: cuDNN's kernel forced (where the device has it).

    python experiments/probes/sdpa_backward.py            # on the GPU: expect NaN for default/cudnn at 192, 320
    python experiments/probes/sdpa_backward.py --device cpu --tiny --rows 2   # the plumbing, on a CPU

Prints one table row per (length, way): the count of non-finite gradient elements, and the loss. Exit 0 when
the ``update`` way is finite at every length.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

LENGTHS = (191, 192, 193, 256, 320)  # 192 and 320 are 64 mod 128


def ways(device: str) -> dict[str, contextlib.AbstractContextManager]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from gigpo_lab.training.attention_backends import update_attention

    found = {"default": contextlib.nullcontext, "update": update_attention}
    if device == "cuda":
        found["cudnn"] = lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tiny", action="store_true", help="2 heads of 64, a CPU dry run of the plumbing")
    args = parser.parse_args()

    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=128 if args.tiny else 896,
        intermediate_size=256 if args.tiny else 4864,
        num_hidden_layers=2,
        num_attention_heads=2 if args.tiny else 14,
        num_key_value_heads=1 if args.tiny else 2,
        max_position_embeddings=1024,
        attn_implementation="sdpa",
    )
    model = Qwen2ForCausalLM(config).to(args.device)
    print(f"torch {torch.__version__}, device {args.device}", end="")
    if args.device == "cuda":
        print(f" ({torch.cuda.get_device_name(0)}, cuDNN {torch.backends.cudnn.version()})", end="")
    print("\n\n| length | way | non-finite grad elements | loss |\n|---|---|---|---|")
    update_finite = True
    for length in LENGTHS:
        ids = torch.randint(0, config.vocab_size, (args.rows, length), device=args.device)
        real = torch.linspace(length // 2, length, args.rows, device=args.device).long()  # left padding
        mask = torch.arange(length, device=args.device)[None, :] >= (length - real)[:, None]
        for way, context in ways(args.device).items():
            model.zero_grad(set_to_none=True)
            try:
                with context(), torch.autocast(args.device, dtype=torch.bfloat16):
                    logits = model(input_ids=ids, attention_mask=mask.long()).logits.float()
                    logp = logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
                    loss = -(logp * mask[:, 1:]).sum() / mask[:, 1:].sum()
                loss.backward()
            except RuntimeError as err:  # a backend the device lacks
                print(f"| {length} | {way} | {type(err).__name__}: {str(err).splitlines()[0][:80]} | |")
                continue
            bad = sum(int((~torch.isfinite(p.grad)).sum()) for p in model.parameters() if p.grad is not None)
            print(f"| {length} | {way} | {bad} | {float(loss.detach()):.4f} |", flush=True)
            update_finite &= way != "update" or bad == 0
    print(
        f"\nsdpa_backward: the update's kernels are {'finite' if update_finite else 'NOT finite'} at every length"
    )
    return 0 if update_finite else 1


if __name__ == "__main__":
    raise SystemExit(main())
