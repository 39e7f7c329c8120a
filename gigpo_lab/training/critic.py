"""The critic's two passes (ARCHITECTURE.md, "Where the critic sits"): V(s_t) before the updates, and the
value loss of a minibatch. Only an estimator that needs the ``values`` column (ppo) gives the policy a value
head; the reference never has one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gigpo_lab.algorithm.loss import PolicyLoss
from gigpo_lab.batch import StepBatch


def trim_prompt(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt columns (n, P) without the left-padding columns no row uses, on ``device``."""
    used = prompt_mask.any(0).nonzero()
    first = int(used[0]) if len(used) else prompt_mask.shape[1] - 1
    return prompt_ids[:, first:].to(device), prompt_mask[:, first:].to(device)


@torch.no_grad()
def score_values(policy, batch: StepBatch, micro_batch_size: int, device: torch.device) -> torch.Tensor:
    """The critic's V(s_t) (N,) float32 on the CPU, no grad: each distinct prompt once, in chunks of
    ``micro_batch_size`` prompts (0: all at once)."""
    rows = torch.cat([batch.prompt_ids, batch.prompt_mask.long()], dim=1)
    distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
    width = batch.prompt_ids.shape[1]
    ids, mask = distinct[:, :width], distinct[:, width:].bool()
    size = micro_batch_size if micro_batch_size > 0 else len(ids)
    values = [
        policy.values(*trim_prompt(ids[chunk], mask[chunk], device)).float().cpu()
        for chunk in torch.arange(len(ids)).split(size)
    ]
    return torch.cat(values)[inverse]


def critic_loss(
    policy,
    loss_fn: PolicyLoss,
    mb: StepBatch,
    micro_batch_size: int,
    device: torch.device,
    iteration: int,
    backward: Callable[[torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor | None, float, float]:
    """(loss, value loss, clip fraction) of minibatch ``mb``: ``loss.value_coef`` times the value loss
    (``loss.value_loss`` against ``mb.value_targets``, clipped around ``mb.values``), in chunks of
    ``micro_batch_size`` rows, each weighted by its share of the rows. With ``backward`` each chunk is
    back-propagated here and the loss is None; without, it is the differentiable sum (to add to the policy's
    loss). The two floats are the chunks' weighted means, for the logs; ``iteration`` names a non-finite loss."""
    n = len(mb)
    size = micro_batch_size if micro_batch_size > 0 else n
    total, value_loss, clipfrac = None, 0.0, 0.0
    for chunk in torch.arange(n, device=mb.prompt_ids.device).split(size):
        vpred = policy.values(*trim_prompt(mb.prompt_ids[chunk], mb.prompt_mask[chunk], device))
        weighted, loss, clipped = loss_fn.critic_loss(vpred, mb.value_targets[chunk], mb.values[chunk])
        share = len(chunk) / n
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"the value loss is {loss.item()} at iteration {iteration}; lower the learning rate or "
                "loss.value_coef, or check the rewards"
            )
        value_loss += float(loss) * share
        clipfrac += float(clipped) * share
        if backward is not None:
            backward(weighted * share)
        else:
            total = weighted * share if total is None else total + weighted * share
    return total, value_loss, clipfrac
