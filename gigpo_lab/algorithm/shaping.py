"""Reward shaping: what is done to the env's step rewards before an estimator sees them.

Pure tensor transforms (no Lightning, no env). ``GiGPOModule.prepare_iteration`` applies them to a collected
batch of N step rows in this order, after the rollout metrics (``rollout/return``, ``rollout/success_rate``)
were taken from the env's own rewards::

    rewards = clip_rewards(rewards, trainer.reward_clip)
    rewards += exploration bonus                      (gigpo_lab/algorithm/exploration.py, unless own_advantage)
    rewards = penalize_kl(rewards, loss.reward_penalty(old_logprobs, ref_logprobs, response_mask))
                                                      (only with loss.kl_in_reward and a reference model)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def clip_rewards(rewards: torch.Tensor, bound: float | None) -> torch.Tensor:
    """``rewards`` (N,) clamped to ``[-bound, bound]``, same dtype; ``bound`` None returns ``rewards`` itself."""
    if bound is None:
        return rewards
    return rewards.clamp(-bound, bound)


def penalize_kl(rewards: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """``rewards`` (N,) minus the per-row KL penalty (N,), in the dtype of ``rewards``.

    ``penalty`` is ``PolicyLoss.reward_penalty``: ``kl_coef * sum_t k1(old, ref)`` over the row's response
    tokens, so each step pays for how far its sampled response drifted from the reference model.
    """
    return rewards - penalty.to(rewards.dtype)
