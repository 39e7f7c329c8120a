"""``PolicyPasses``: how the module runs the policy (and its reference) over rows: the scoring of an iteration's
old and reference log-probs, and a minibatch's loss to back-propagate.

Each pass takes one of two paths, as the loop settings (``TrainerConfig``) say: whole rows at once (each
distinct row once with ``trainer.distinct_rows``), or chunks (``gigpo_lab.packing.microbatch``): micro-batches of
``trainer.micro_batch_size`` rows, prompt runs the rows share packed once (``trainer.shared_prefix``), or both.
The critic's value loss (``gigpo_lab.training.critic``) joins a minibatch's loss on either path.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from gigpo_lab.algorithm.diagnostics import logprob_gap, token_entropy
from gigpo_lab.algorithm.loss import LossOutput, PolicyLoss
from gigpo_lab.batch import StepBatch
from gigpo_lab.packing.distinct_rows import distinct_rows_logprobs, score_unique_rows
from gigpo_lab.packing.microbatch import chunked_logprobs, microbatched_loss
from gigpo_lab.training.attention_backends import update_attention
from gigpo_lab.training.critic import critic_loss
from gigpo_lab.training.schema import TrainerConfig


def _plain_logprobs(model, *columns: torch.Tensor, temperature: float = 1.0):
    """``model.logprobs`` on every row: the update's forward without ``distinct_rows``."""
    return model.logprobs(*columns, temperature=temperature)


class PolicyPasses:
    """The forward passes of one policy, its reference (or None) and its loss, under the loop settings ``loop``.

    Args:
        temperature: the rollout's sampling temperature; old, reference and current log-probs are all taken at
            it, so the PPO ratio compares the distributions the tokens were sampled from (verl's choice).
        shared_prefix / shared_prefix_tokens: ``trainer.shared_prefix`` and ``shared_prefix_tokens`` as they
            apply (null resolved by the policy).
        critic: whether a minibatch's loss adds the critic's value loss.
        stats: where the critic's ``train/value_loss`` and ``train/value_clipfrac`` are appended, per minibatch.
    """

    def __init__(
        self,
        policy,
        reference,
        loss_fn: PolicyLoss,
        loop: TrainerConfig,
        temperature: float,
        shared_prefix: bool,
        shared_prefix_tokens: int,
        critic: bool,
        stats: defaultdict[str, list[float]],
    ) -> None:
        self.policy, self.reference, self.loss_fn, self.loop = policy, reference, loss_fn, loop
        self.temperature, self.critic, self.stats = temperature, critic, stats
        self.shared_prefix, self.shared_prefix_tokens = shared_prefix, shared_prefix_tokens

    @property
    def chunked(self) -> bool:
        """Whether scoring and updates go through the chunked path (``gigpo_lab.packing.microbatch``)."""
        return self.loop.micro_batch_size > 0 or self.shared_prefix

    def score(self, batch: StepBatch, device: torch.device) -> dict[str, float]:
        """Fill ``old_logprobs`` (the policy before this iteration's updates) and ``ref_logprobs``; return the
        sampling policy's entropy and the gap between the engine's sampling log-probs and the rescored ones.

        With ``reuse_rollout_logprobs`` the engine's sampling log-probs stay the old ones and only the reference
        is scored (no entropy or gap metrics then); with ``micro_batch_size`` the rows are scored in chunks.
        """
        cols = batch.token_columns()
        if self.loop.reuse_rollout_logprobs:
            if self.reference is not None:
                batch.ref_logprobs = self._logprobs(self.reference, cols, device)[0]
            return {}
        sampled = batch.old_logprobs
        batch.old_logprobs, entropy = self._logprobs(self.policy, cols, device)
        if self.reference is not None:
            batch.ref_logprobs = self._logprobs(self.reference, cols, device)[0]
        metrics = token_entropy(entropy, batch.response_mask)
        if sampled is not None:
            metrics.update(logprob_gap(sampled, batch.old_logprobs, batch.response_mask))
        return metrics

    def _logprobs(self, scorer, cols: tuple[torch.Tensor, ...], device) -> tuple[torch.Tensor, torch.Tensor]:
        """``scorer.logprobs`` (N, R) each, log-probs and entropies, on the CPU: distinct rows in one pass, or
        in micro-batches."""
        t = self.temperature
        if self.chunked:
            return chunked_logprobs(
                scorer,
                cols,
                self.loop.micro_batch_size,
                t,
                device,
                self.shared_prefix,
                self.shared_prefix_tokens,
            )
        logp, entropy = score_unique_rows(scorer, *(c.to(device) for c in cols), temperature=t)
        return logp.cpu(), entropy.cpu()

    def minibatch_loss(
        self, mb: StepBatch, backward, device: torch.device, iteration: int = 0
    ) -> tuple[torch.Tensor, LossOutput]:
        """The loss of minibatch ``mb`` (on ``device``) to back-propagate, and its ``LossOutput``.

        On the chunked path every chunk but the last is back-propagated here by ``backward`` (one 0-dim loss ->
        None), and the returned loss is the last chunk's; otherwise the returned loss is the whole minibatch's
        and ``backward`` is not called. ``iteration`` names a non-finite value loss. The forward passes run
        without cuDNN's attention kernel, whose backward can return NaN (``attention_backends.py``).
        """
        with update_attention():
            return self._minibatch_loss(mb, backward, device, iteration)

    def _minibatch_loss(
        self, mb: StepBatch, backward, device, iteration: int
    ) -> tuple[torch.Tensor, LossOutput]:
        if self.chunked:
            loss, out = microbatched_loss(
                self.policy,
                self.loss_fn,
                mb,
                self.loop.micro_batch_size,
                self.temperature,
                backward,
                distinct=self.loop.distinct_rows,
                shared_prefix=self.shared_prefix,
                max_tokens=self.shared_prefix_tokens,
            )
            if self.critic:  # its chunks back-propagated here, as the policy loss's are
                self.critic_loss(mb, device, iteration, backward)
            return loss, out
        logprobs = distinct_rows_logprobs if self.loop.distinct_rows else _plain_logprobs
        logp, entropy = logprobs(self.policy, *mb.token_columns(), temperature=self.temperature)
        out = self.loss_fn(logp, mb.old_logprobs, mb.advantages, mb.response_mask, entropy, mb.ref_logprobs)
        if self.critic:
            return out.loss + self.critic_loss(mb, device, iteration), out
        return out.loss, out

    def critic_loss(self, mb: StepBatch, device, iteration: int, backward=None) -> torch.Tensor | None:
        """``gigpo_lab.training.critic.critic_loss`` of minibatch ``mb``; records ``train/value_loss`` and
        ``train/value_clipfrac``."""
        total, value_loss, clipfrac = critic_loss(
            self.policy, self.loss_fn, mb, self.loop.micro_batch_size, device, iteration, backward
        )
        self.stats["train/value_loss"].append(value_loss)
        self.stats["train/value_clipfrac"].append(clipfrac)
        return total
