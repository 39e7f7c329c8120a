"""The non-finite-gradient guard's witness: which parameter's gradient turned non-finite first in the backward pass.

A finite loss with a non-finite gradient norm says that the backward pass itself produced the NaN or inf (the
H200's bf16 run, experiments/results/gpu/README.md). The norm alone does not say where. ``GradientWatch`` puts a
tensor hook on every trainable parameter; each hook records, in the order the backward passes reach the
parameters (the last layer's first), a 0-dim flag of whether the gradient it saw was finite. Recording keeps no
device sync: the flags are read once, and only when the guard fires (``first_non_finite``).

A tensor hook sees the gradient of one backward call before it is accumulated into ``.grad``, so with
micro-batches the culprit is named in its own chunk, and under DDP on its own rank before the all-reduce
spreads it. Under ``lightning=fsdp`` the sharded parameters' gradients are written by the reduce-scatter, not by
autograd; there the watch names the first non-finite sharded gradient in reverse registration order instead
(``first_non_finite(params)``), the order a backward pass reaches a decoder's layers.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class GradientWatch:
    """Finite-or-not flags of every trainable parameter's gradient, in the order the backward pass made them.

    Args:
        named_parameters: ``(name, parameter)`` pairs, as ``module.named_parameters()`` yields them; the ones
            with ``requires_grad`` are watched.
    """

    def __init__(self, named_parameters: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        self._seen: list[tuple[str, int, torch.Tensor]] = []  # (name, backward call, 0-dim bool: finite)
        self._call = 0  # backward calls since the last reset (micro-batches: one each)
        self._handles = [
            param.register_hook(self._hook(name)) for name, param in named_parameters if param.requires_grad
        ]

    def _hook(self, name: str):
        def hook(grad: torch.Tensor) -> None:
            self._seen.append((name, self._call, torch.isfinite(grad).all()))

        return hook

    def counted(self, backward):
        """``backward`` (a loss -> None callable, as ``manual_backward``), counting each call."""

        def run(loss: torch.Tensor) -> None:
            backward(loss)
            self._call += 1

        return run

    def reset(self) -> None:
        """Forget the flags: a new optimizer step's gradients start from zero."""
        self._seen.clear()
        self._call = 0

    def first_non_finite(self, params: Iterable[tuple[str, torch.nn.Parameter]] = ()) -> str | None:
        """``"<name>'s (in backward call k …)"`` of the first non-finite gradient the hooks saw; without any flag
        (the hooks did not fire: fsdp's sharded gradients), the first parameter of ``params``, in reverse order,
        whose ``.grad`` is not finite; None when every one is finite."""
        if self._seen:
            finite = torch.stack([flag for _, _, flag in self._seen]).cpu()  # the one device sync
            bad = (~finite).nonzero()
            if len(bad):
                name, call, _ = self._seen[int(bad[0])]
                return f"{name}'s (in backward call {call + 1} of the optimizer step)"
            return None
        for name, param in reversed(list(params)):
            grad = param.grad
            if grad is not None and not bool(torch.isfinite(_local(grad)).all()):
                return f"{name}'s (its shard; the first in reverse layer order)"
        return None

    def remove(self) -> None:
        """Take the hooks off."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard; any other tensor unchanged."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


#: What the guard says when no hook saw a non-finite gradient and no ``.grad`` is non-finite (the norm itself
#: overflowed, or a gradient turned non-finite after the backward pass).
UNSEEN = "not any single parameter's: every gradient the hooks saw was finite"


def first_culprit_across_ranks(mine: str | None, strategy) -> str:
    """Every rank's ``first_non_finite`` gathered (a collective; every rank is at the guard): ``"rank r: …"`` of
    the lowest rank that saw one, ``mine`` in a single process, or ``UNSEEN``."""
    world = getattr(strategy, "world_size", 1) if strategy is not None else 1
    if world <= 1:
        return mine or UNSEEN
    import torch.distributed as dist

    found: list[str | None] = [None] * world
    dist.all_gather_object(found, mine)
    return next((f"rank {rank}: {name}" for rank, name in enumerate(found) if name), UNSEEN)
