"""AdamW with per-tensor update clipping ("StableAdamW"), an option for ``trainer.optimizer``.

Wortsman et al. 2023, "Stable and low-precision training for large-scale vision-language models"
(arXiv 2304.13013, Algorithm 2), after AdaFactor's update clipping (Shazeer & Stern 2018): Adam's step is
unsafe when a weight's second-moment estimate v is tiny from a quiet past and its gradient suddenly is
not, the mechanism of docs/WHY_RUNS_FAIL.md's cause 1. For each parameter tensor, with g its gradient and
v_hat the bias-corrected second moment after this step's update,

    rms = sqrt(mean(g^2 / max(v_hat, eps^2)))
    lr_t = lr / max(1, rms)

and the step is AdamW's with lr_t in place of lr (decoupled weight decay included). Where the gradient is
no larger than its history says (rms <= 1), it is AdamW's step.

Use: ``trainer.optimizer._target_=gigpo_lab.training.stable_adamw.StableAdamW`` (the other keys are
AdamW's: lr, betas, eps, weight_decay).
"""

from __future__ import annotations

import math

import torch


class StableAdamW(torch.optim.Optimizer):
    """AdamW whose per-tensor learning rate is divided by max(1, rms) (module docstring).

    Args:
        params: the parameters or parameter groups, as for any torch optimizer.
        lr: the step size before clipping, > 0.
        betas: (beta1, beta2) of the first and second moments, each in [0, 1).
        eps: added to sqrt(v_hat) in the step, and eps^2 floors v_hat in rms; > 0.
        weight_decay: decoupled weight decay (AdamW's), >= 0.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if not lr > 0:
            raise ValueError(f"StableAdamW: lr={lr} must be > 0")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"StableAdamW: betas={tuple(betas)} must each lie in [0, 1)")
        if not eps > 0:
            raise ValueError(f"StableAdamW: eps={eps} must be > 0")
        if not weight_decay >= 0:
            raise ValueError(f"StableAdamW: weight_decay={weight_decay} must be >= 0")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            eps = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                rms = math.sqrt(float((g * g / v_hat.clamp(min=eps * eps)).mean()))
                lr = group["lr"] / max(1.0, rms)
                p.mul_(1 - lr * group["weight_decay"])
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)
        return loss
