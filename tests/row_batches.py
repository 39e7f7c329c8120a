"""Row columns and minibatches built by hand for the scoring and micro-batch tests (``Policy.logprobs`` layout):
left-padded prompts, right-padded responses, and a ``StepBatch`` around them with noisy old log-probs."""

from __future__ import annotations

import torch

from gigpo_lab.batch import StepBatch


def pad_rows(prompts: list[list[int]], responses: list[list[int]], pad: int):
    """Left-padded prompts and right-padded responses with their masks: prompt_ids, prompt_mask (N, P),
    response_ids, response_mask (N, R)."""
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[False] * (width_p - len(p)) + [True] * len(p) for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    response_mask = torch.tensor([[True] * len(r) + [False] * (width_r - len(r)) for r in responses])
    return prompt_ids, prompt_mask, response_ids, response_mask


def minibatch(policy, cols, gen: torch.Generator, with_ref: bool = True) -> StepBatch:
    """A ``StepBatch`` of the rows ``cols`` (``pad_rows``): old log-probs are the policy's plus noise (0.1 std),
    the reference's (``with_ref``) the policy's minus it, advantages standard normal; both drawn from ``gen``."""
    n, response_mask = len(cols[0]), cols[3]
    noise = 0.1 * torch.randn(response_mask.shape, generator=gen)
    with torch.no_grad():
        logp = policy.logprobs(*cols)[0]
    zero = torch.zeros(())
    return StepBatch(
        group_ids=torch.zeros(n, dtype=torch.long),
        traj_ids=torch.arange(n),
        step_ids=torch.zeros(n, dtype=torch.long),
        rewards=torch.zeros(n),
        prompt_ids=cols[0],
        prompt_mask=cols[1],
        response_ids=cols[2],
        response_mask=response_mask,
        old_logprobs=torch.where(response_mask, logp + noise, zero),
        ref_logprobs=torch.where(response_mask, logp - noise, zero) if with_ref else None,
        advantages=torch.randn(n, generator=gen),
    )


def grads(policy) -> torch.Tensor:
    """Every parameter gradient of ``policy``, flattened into one vector (parameters without one left out)."""
    return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])
