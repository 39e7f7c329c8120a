"""How far blocked attention (``BlockMask``) drifts from dense-mask attention by float32 rounding alone, and
whether a bound in float32 epsilons of each tensor's scale still catches a wrong mask.

The two paths compute the same function with other matrix shapes, so they differ only in summation order.
This script draws random cases over the argument ranges of
``tests/policy/test_tiny_gpt.py::test_block_attention_equals_the_dense_mask`` (query length, cached prefix,
block size, mask density, seed; the layer's weights come from the seed), and prints:

- the worst difference over the drawn cases, per tensor (output, input gradient, weight gradient), in float32
  epsilons of that tensor's largest entry: the test's ``ROUNDING_EPS`` must sit well above it;
- how many draws a bound of ``--bound`` epsilons catches when the blocked path is given a mask with one entry
  flipped (a query's own key never flips): it must catch them all.

Usage (from the repo root)::

    python experiments/bench/block_attention_rounding.py            # 1,500 draws, bound 64
    python experiments/bench/block_attention_rounding.py --draws 200 --bound 32
"""

from __future__ import annotations

import argparse
import random

import torch

from gigpo_lab.policy.tiny_gpt import BlockMask, CausalSelfAttention

EPS = torch.finfo(torch.float32).eps
TENSORS = ("output", "grad of x", "grad of qkv.weight")


def attend_both(t: int, prefix: int, block: int, density: float, seed: int, flip: bool):
    """Output, input gradient and qkv weight gradient through the dense mask and through ``BlockMask``.

    Shapes: x ``(1, t, 16)``, the cached keys/values ``(1, 2, prefix, 8)``, the mask ``(t, prefix + t)``.
    With ``flip``, the blocked path's mask has one entry other than a query's own key inverted.
    Returns ``(dense, blocked)``, each a tuple of the three tensors.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = CausalSelfAttention(16, 2, qk_norm=True)
    allowed = torch.rand(t, prefix + t, generator=gen) < density
    allowed[:, prefix:] |= torch.eye(t, dtype=torch.bool)
    past = (torch.randn(1, 2, prefix, 8, generator=gen), torch.randn(1, 2, prefix, 8, generator=gen))
    x = torch.randn(1, t, 16, generator=gen, requires_grad=True)
    other = allowed.clone()
    if flip:
        row = seed % t
        cols = [c for c in range(prefix + t) if c != prefix + row]
        if cols:
            col = cols[seed % len(cols)]
            other[row, col] = ~other[row, col]
    results = []
    for pattern in (allowed[None, None], BlockMask.from_dense(other, block)):
        layer.zero_grad()
        x.grad = None
        out, _ = layer.attend(x, pattern, past if prefix else None)
        out.square().sum().backward()
        results.append((out.detach(), x.grad.clone(), layer.qkv.weight.grad.clone()))
    return results[0], results[1]


def in_eps(dense: torch.Tensor, blocked: torch.Tensor) -> float:
    """The largest difference, in float32 epsilons of ``dense``'s largest entry (0 for an all-zero tensor)."""
    scale = dense.abs().max().item()
    return (blocked - dense).abs().max().item() / (EPS * scale) if scale else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=1500, help="random cases to draw (default 1500)")
    parser.add_argument("--bound", type=float, default=64.0, help="the bound in float32 eps (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    worst = dict.fromkeys(TENSORS, 0.0)
    caught = 0
    flippable = 0
    for _ in range(args.draws):
        case = (
            rng.randint(1, 40),
            rng.randint(0, 5),
            rng.randint(1, 16),
            rng.random(),
            rng.randint(0, 10**6),
        )
        dense, blocked = attend_both(*case, flip=False)
        for name, d, b in zip(TENSORS, dense, blocked, strict=True):
            worst[name] = max(worst[name], in_eps(d, b))
        t, prefix = case[0], case[1]
        if prefix + t > 1:  # a 1x1 mask has only the query's own key
            flippable += 1
            dense, wrong = attend_both(*case, flip=True)
            caught += any(in_eps(d, w) > args.bound for d, w in zip(dense, wrong, strict=True))

    print(f"{args.draws} draws; differences in float32 eps of each tensor's largest entry")
    print(f"{'tensor':<22}{'worst (eps)':>12}{'bound / worst':>15}")
    for name, value in worst.items():
        ratio = f"{args.bound / value:.1f}" if value else "inf"
        print(f"{name:<22}{value:>12.2f}{ratio:>15}")
    print(f"one mask entry flipped: caught by the {args.bound:g}-eps bound in {caught}/{flippable} draws")


if __name__ == "__main__":
    main()
