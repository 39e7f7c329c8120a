"""Undo the last optimizer step: the parameters and the optimizer's state as they were before it.

``trainer.kl_rollback`` uses it. ``trainer.target_kl`` alone stops an iteration once the policy has drifted
too far, but keeps the step that drifted; on Taxi that one step can carry approx_kl from 0.01 to 10 or more
(docs/WHY_RUNS_FAIL.md, cause 6's probes). With the snapshot the step is taken back, so an iteration ends
on a policy that was measured within ``target_kl``. A backtracking rule of this kind is what TRPO's line
search does (Schulman et al. 2015, arXiv 1502.05477, appendix C), here with one step back and no retry.
"""

from __future__ import annotations

import torch


def _copy(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


class StepSnapshot:
    """The parameters of a module and the per-parameter state of its optimizer at one moment.

    ``take`` before ``optimizer.step()``; ``restore`` puts both back in place (the same tensors, so the
    optimizer's references stay valid). Copies cost one pass over the parameters and the optimizer's state
    (AdamW: three tensors per parameter), which on the tiny policy is small next to the step's forward and
    backward.
    """

    def __init__(self) -> None:
        self._params: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self._state: list[tuple[torch.nn.Parameter, dict]] = []
        self._optimizer: torch.optim.Optimizer | None = None

    @property
    def taken(self) -> bool:
        return self._optimizer is not None

    @torch.no_grad()
    def take(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Copy ``module``'s trainable parameters and ``optimizer.state`` of each of them (empty before its first
        step); frozen ones (a LoRA model's base) cannot change in a step, so they are not copied."""
        params = [p for p in module.parameters() if p.requires_grad]
        self._params = [(p, p.detach().clone()) for p in params]
        self._state = [(p, {k: _copy(v) for k, v in optimizer.state.get(p, {}).items()}) for p in params]
        self._optimizer = optimizer

    @torch.no_grad()
    def restore(self) -> None:
        """Put the copied parameters and optimizer state back; the snapshot is then spent."""
        if self._optimizer is None:
            raise RuntimeError("StepSnapshot.restore() without a take(): there is no step to undo")
        for p, saved in self._params:
            p.copy_(saved)
        for p, saved in self._state:
            if saved:
                self._optimizer.state[p] = {k: _copy(v) for k, v in saved.items()}
            else:
                self._optimizer.state.pop(p, None)  # the step undone was this parameter's first
        self._params, self._state, self._optimizer = [], [], None
