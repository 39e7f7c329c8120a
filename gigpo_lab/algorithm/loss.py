"""The policy loss: PPO clipped surrogate + KL to the reference + entropy bonus.

Every function works on per-token tensors of shape (N, R): N step rows, R response tokens, with a bool
``mask`` (N, R) that is True on real response tokens. The advantage of a row, shape (N,), is broadcast to
all of its response tokens (ALGORITHMS.md, "The loss").

The ratio is PPO's per token (``ratio_level=token``, the default) or GSPO's per sequence
(``ratio_level=sequence``: one turn's response is one sequence; ``sequence_clipped_surrogate``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

from gigpo_lab.choices import choice_enum, default_of

KL_ESTIMATORS = ("k1", "k2", "k3")


def _token_mean(values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (values * m).sum() / m.sum().clamp_min(1.0)


def _row_sums(values: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    row_tokens = m.sum(dim=1)
    rows = row_tokens > 0  # rows without a real token are left out of the row means
    return (values * m).sum(dim=1)[rows], row_tokens[rows]


def _seq_mean_token_mean(values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    row_sum, row_tokens = _row_sums(values, m)
    return (row_sum / row_tokens).mean() if row_sum.numel() else values.new_zeros(())


def _seq_mean_token_sum(values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    row_sum, _ = _row_sums(values, m)
    return row_sum.mean() if row_sum.numel() else values.new_zeros(())


_AGG: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
}
AGGREGATIONS = tuple(_AGG)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce per-token ``values`` (N, R) over the ``mask`` (N, R) to a scalar.

    - ``token-mean``: the mean over every real token of the minibatch (long responses weigh more).
    - ``seq-mean-token-mean``: the mean over rows of each row's token mean.
    - ``seq-mean-token-sum``: the mean over rows of each row's token sum (Dr.GRPO-style, no length norm).
    """
    try:
        fn = _AGG[mode]
    except KeyError:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}") from None
    return fn(values, mask.to(values.dtype))


def _k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio


def _k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio.square()


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # low-variance, non-negative estimator: exp(ref - logp) - (ref - logp) - 1
    # (http://joschu.net/blog/kl-approx.html); the ratio is clamped as verl does to keep it finite.
    neg = (-log_ratio).clamp(-20.0, 20.0)
    return (neg.exp() - neg - 1.0).clamp(-10.0, 10.0)


_KL: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens, shape (N, R).

    k1 = log pi - log pi_ref; k2 = (log pi - log pi_ref)^2 / 2; k3 = r - log r - 1 with r = pi_ref / pi
    (Schulman, "Approximating KL divergence", http://joschu.net/blog/kl-approx.html).
    """
    try:
        fn = _KL[estimator]
    except KeyError:
        raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}") from None
    return fn(logp - ref_logp)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token (Schulman et al. 2017, arXiv 1707.06347), with asymmetric clip.

    Args:
        logp, old_logp: (N, R) log-probs of the response tokens under the current and the sampling policy.
        advantages: (N,) one value per row, broadcast to its tokens.
    Returns:
        loss (N, R) = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), and
        clipped (N, R) bool: where the clipped term was the active one.
    """
    import torch

    adv = advantages.unsqueeze(1).to(logp.dtype)
    ratio = (logp - old_logp).exp()
    unclipped = ratio * adv
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = clipped_ratio * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, clipped < unclipped


def value_loss(
    vpred: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's loss, one value per row (verl ``core_algos.compute_value_loss``; PPO, arXiv 1707.06347)::

        V_clip = clamp(V, old - c, old + c)
        loss   = 0.5 * mean over rows of max((V - R)^2, (V_clip - R)^2)     (clip None: 0.5 * mean (V - R)^2)

    Args:
        vpred: (N,) the value head's V(s_t), with grad. targets: (N,) R_t. old_values: (N,) V before the update.
        clip: c > 0, or None for no clipping.
    Returns:
        the loss (0-dim) and the fraction of rows where the clipped term was the larger one (0-dim, no grad).
    """
    import torch

    targets, old_values = targets.to(vpred.dtype), old_values.to(vpred.dtype)
    plain = (vpred - targets).square()
    if clip is None:
        return 0.5 * plain.mean(), plain.new_zeros(())
    clipped = (vpred.clamp(old_values - clip, old_values + clip) - targets).square()
    loss = 0.5 * torch.maximum(plain, clipped).mean()
    return loss, (clipped > plain).to(vpred.dtype).mean().detach()


def sequence_clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO's clipped surrogate (Zheng et al. 2025, arXiv 2507.18071, section 4.1, eq. 5; verl's
    ``compute_policy_loss_gspo`` in ``verl/trainer/ppo/core_algos.py``): one ratio per row, the length-normalised
    sequence ratio s = exp(mean over the row's real tokens of (logp - old_logp)), clipped at the sequence level.

    Args:
        logp, old_logp, mask: (N, R); advantages: (N,). A row without a real token has s = 1.
    Returns:
        loss (N, R): the row's -min(s * A, clip(s, 1 - clip_low, 1 + clip_high) * A) on each of its tokens (its
        gradient is verl's GSPO-token form with one advantage per sequence), and clipped (N, R) bool, the row's
        flag on each token.
    """
    import torch

    m = mask.to(logp.dtype)
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    s = (log_ratio.sum(dim=1) / m.sum(dim=1).clamp_min(1.0)).exp()  # (N,)
    adv = advantages.to(logp.dtype)
    unclipped = s * adv
    clipped = s.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss.unsqueeze(1).expand_as(logp), (clipped < unclipped).unsqueeze(1).expand_as(logp)


def _token_surrogate(logp, old_logp, advantages, mask, clip_low, clip_high):
    return clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high)


#: ``loss.ratio_level`` -> its surrogate, called (logp, old_logp, advantages, mask, clip_low, clip_high).
_SURROGATES: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "token": _token_surrogate,
    "sequence": sequence_clipped_surrogate,
}
RATIO_LEVELS = tuple(_SURROGATES)


@dataclass
class LossOutput:
    """The scalar loss and its parts, for logging (all 0-dim tensors)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clipfrac: torch.Tensor
    approx_kl: torch.Tensor


class PolicyLoss:
    """The configured loss. Built by Hydra from ``conf/loss/*.yaml`` (schema: ``LossConfig``).

    Args:
        clip_low / clip_high: epsilon_low / epsilon_high of the clipped ratio (0.2 each: PPO's default).
        aggregation: one of ``AGGREGATIONS``.
        kl_coef: beta of the KL term (0 turns the reference model off altogether).
        kl_estimator: one of ``KL_ESTIMATORS``; ``k3`` is verl's ``low_var_kl``.
        kl_in_reward: subtract beta * sum_t k1 from the step reward instead of adding a loss term; None = the
            estimator's own default (``estimator.kl_in_reward``, a class attribute; false without an estimator).
        estimator: the run's estimator, whose default None defers to.
        entropy_coef: weight of the entropy bonus (subtracted from the loss).
        value_coef: weight c1 of the critic's loss (``value_loss``) added to the policy's; read only when the
            estimator has a critic (ppo), with which the policy carries a value head.
        value_clip: verl's ``cliprange_value``: the new value stays within this of the old one in the loss;
            None = no clipping.
        ratio_level: one of ``RATIO_LEVELS``: ``token`` = PPO's per-token ratio; ``sequence`` = GSPO's
            length-normalised ratio of each row's response, clipped per row (``sequence_clipped_surrogate``).
    """

    def __init__(
        self,
        clip_low: float = 0.2,
        clip_high: float = 0.2,
        aggregation: str = "token-mean",
        kl_coef: float = 0.0,
        kl_estimator: str = "k3",
        kl_in_reward: bool | None = None,
        entropy_coef: float = 0.0,
        value_coef: float = 1.0,
        value_clip: float | None = 0.5,
        estimator=None,
        ratio_level: str = "token",
    ) -> None:
        # aggregation and kl_estimator: Enums in the schema (compose time); aggregate/kl_per_token list the
        # valid names to a Python caller
        if kl_coef < 0 or clip_low < 0 or clip_high < 0:
            raise ValueError("loss.kl_coef, loss.clip_low and loss.clip_high must be >= 0")
        self.clip_low, self.clip_high = clip_low, clip_high
        self.aggregation = aggregation
        if kl_in_reward is None:
            kl_in_reward = bool(getattr(estimator, "kl_in_reward", False))
        self.kl_coef, self.kl_estimator, self.kl_in_reward = kl_coef, kl_estimator, kl_in_reward
        self.entropy_coef = entropy_coef
        if value_coef < 0 or (value_clip is not None and value_clip <= 0):
            raise ValueError("loss.value_coef must be >= 0 and loss.value_clip > 0 (or null: no clipping)")
        self.value_coef, self.value_clip = value_coef, value_clip
        if ratio_level not in _SURROGATES:
            raise ValueError(f"unknown loss.ratio_level {ratio_level!r}; valid: {', '.join(RATIO_LEVELS)}")
        self.ratio_level = str(ratio_level)

    def critic_loss(
        self, vpred: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``value_coef`` times ``value_loss`` (0-dim, to add to the policy's loss), the unweighted value loss
        and its clip fraction (both detached, for logging)."""
        loss, clipfrac = value_loss(vpred, targets, old_values, self.value_clip)
        return self.value_coef * loss, loss.detach(), clipfrac

    @property
    def needs_reference(self) -> bool:
        """Whether a frozen reference model must be kept (any KL at all)."""
        return self.kl_coef > 0

    def reward_penalty(
        self, old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Per-row KL penalty beta * sum_t k1 (N,), subtracted from the step reward when ``kl_in_reward``."""
        kl = kl_per_token(old_logp, ref_logp, "k1") * mask
        return self.kl_coef * kl.sum(dim=1)

    def __call__(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        entropy: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> LossOutput:
        """Loss of one minibatch. Shapes: logp, old_logp, mask, entropy, ref_logp (N, R); advantages (N,)."""
        import torch

        surrogate = _SURROGATES[self.ratio_level]
        pg, clipped = surrogate(logp, old_logp, advantages, mask, self.clip_low, self.clip_high)
        pg_loss = aggregate(pg, mask, self.aggregation)
        zero = pg_loss.new_zeros(())
        kl = zero
        if ref_logp is not None and self.kl_coef > 0:
            kl = aggregate(kl_per_token(logp, ref_logp, self.kl_estimator), mask, self.aggregation)
        ent = aggregate(entropy, mask, self.aggregation) if entropy is not None else zero
        # the term only when it is on: 0 * a non-finite entropy (a bf16 probability that underflowed to 0 times
        # its log, -inf) is NaN, and the H200 check's 0.5 B bf16-mixed run went NaN at its fourth iteration
        loss = pg_loss - self.entropy_coef * ent if self.entropy_coef else pg_loss
        if not self.kl_in_reward:
            loss = loss + self.kl_coef * kl
        with torch.no_grad():
            m = mask.to(logp.dtype)
            n = m.sum().clamp_min(1.0)
            clipfrac = (clipped.to(logp.dtype) * m).sum() / n
            approx_kl = (0.5 * (logp - old_logp).square() * m).sum() / n
        return LossOutput(loss, pg_loss.detach(), kl.detach(), ent.detach(), clipfrac, approx_kl)


Aggregation = choice_enum("Aggregation", AGGREGATIONS, __name__)
KLEstimator = choice_enum("KLEstimator", KL_ESTIMATORS, __name__)
RatioLevel = choice_enum("RatioLevel", RATIO_LEVELS, __name__)


@dataclass
class LossConfig:
    """The policy loss (``gigpo_lab.algorithm.loss.PolicyLoss``): PPO clipped surrogate + KL to the reference
    + entropy bonus."""

    _target_: str = "gigpo_lab.algorithm.loss.PolicyLoss"
    #: epsilon_low: the ratio is clipped at 1 - clip_low (PPO's 0.2).
    clip_low: float = default_of(PolicyLoss, "clip_low")
    #: epsilon_high: the ratio is clipped at 1 + clip_high (DAPO uses 0.28).
    clip_high: float = default_of(PolicyLoss, "clip_high")
    #: How token losses become one number: the mean over all tokens, or per sequence (mean or sum of its
    #: tokens) then the mean over sequences.
    aggregation: Aggregation = Aggregation[default_of(PolicyLoss, "aggregation")]
    #: beta of the KL to the frozen reference; 0 = no reference (a from-scratch policy's reference would be
    #: its random init); the GiGPO paper's LLM runs use 0.01.
    kl_coef: float = default_of(PolicyLoss, "kl_coef")
    #: KL estimator (Schulman's k1, k2, k3); k3 = low_var_kl, verl's default for GRPO/GiGPO.
    kl_estimator: KLEstimator = KLEstimator[default_of(PolicyLoss, "kl_estimator")]
    #: true = subtract beta * KL from the step reward instead of a loss term; null = the estimator's own
    #: default (its class attribute kl_in_reward: true for rloo and reinforce_pp, false for the others).
    kl_in_reward: Optional[bool] = default_of(PolicyLoss, "kl_in_reward")  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: Weight of the entropy bonus subtracted from the loss; 0 = off, the default: the count bonus of
    #: ``exploration`` does the exploring, and a fixed entropy bonus under Adam keeps pushing a policy whose
    #: groups are all flat towards uniform, so GRPO's greedy policy drifted into loops (docs/WHY_RUNS_FAIL.md).
    #: The withdrawn study run at b8f873d (experiments/RESULTS.md, "The earlier study") was measured with 0.01.
    entropy_coef: float = default_of(PolicyLoss, "entropy_coef")
    #: c1, weight of the critic's loss 0.5 * max((V - R)^2, (V_clip - R)^2) in the one loss that trains the
    #: policy and its value head together (PPO's shared-parameter objective, arXiv 1707.06347 eq. 9; c1 = 1 as
    #: its Atari runs); read only by estimators with a critic (ppo).
    value_coef: float = default_of(PolicyLoss, "value_coef")
    #: verl's critic.cliprange_value (0.5): the value's change from its old value is clipped to this in the
    #: loss; null = no clipping. Read only with a critic (ppo).
    value_clip: Optional[float] = default_of(PolicyLoss, "value_clip")  # noqa: UP045
    #: Where the importance ratio lives: token = PPO's ratio per token; sequence = GSPO's (Zheng et al. 2025,
    #: arXiv 2507.18071): one ratio per row, exp(mean over its response tokens of log pi - log pi_old), one turn's
    #: response = one sequence, clipped per row. loss=gspo sets it with the paper's clip 3e-4 / 4e-4 and
    #: seq-mean-token-mean (the paper's mean over sequences).
    ratio_level: RatioLevel = RatioLevel[default_of(PolicyLoss, "ratio_level")]


#: This module's option of the ``loss`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"loss/ppo": LossConfig}
