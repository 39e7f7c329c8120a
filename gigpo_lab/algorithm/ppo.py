"""ppo: PPO with a learned critic, turn-level GAE(gamma, lam) advantages (Schulman et al. 2017, arXiv 1707.06347;
GAE: Schulman et al. 2016, arXiv 1506.02438, eq. 16).

ALGORITHMS.md, "ppo"; verl ``trainer/ppo/core_algos.py`` (``compute_gae_advantage_return``, then
``verl_F.masked_whiten``), at the turn level as RAGEN's and verl-agent's multi-turn PPO compute it: one value
per turn (a row), read by the policy's value head at the turn's last prompt token, and the turn's advantage
given to all of its response tokens::

    r'_t    = r_t - p * invalid_t                    the invalid-action penalty, in the turn's reward
    delta_t = r'_t + gamma * V_{t+1} - V_t           V_T = 0 after a trajectory's last turn
    A_t     = delta_t + gamma * lam * A_{t+1}        (``gae.turn_gae``)
    R_t     = A_t + V_t                              the critic's target (``AdvantageOutput.returns``)
    A_t    <- (A_t - mean(A)) / sqrt(var(A) + 1e-8)  whiten over the batch's rows (unbiased var), if whiten

``V`` is the ``values`` column: the trainer scores it with the old log-probs (no grad), before the updates.
Groups play no part: ``group_ids`` is read only because every batch carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import BASE_COLUMNS, INVALID_ACTION_PENALTY, Estimator, summary_metrics
from gigpo_lab.algorithm.gae import turn_gae
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param

#: Added to the variance before its square root when whitening (verl's ``masked_whiten``).
WHITEN_EPS = 1e-8


def whiten(x: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over all of ``x`` (N,), var unbiased (verl ``masked_whiten`` with every entry
    in the mask); fewer than two entries: x - mean (= 0)."""
    import torch

    centred = x - x.mean()
    if x.numel() < 2:
        return centred
    return centred * torch.rsqrt(x.var() + WHITEN_EPS)


def explained_variance(values: torch.Tensor, targets: torch.Tensor) -> float:
    """1 - var(R - V) / var(R): 1 = the critic predicts its targets, 0 = no better than their mean, < 0 worse
    (NaN-free: 0 when the targets do not vary)."""
    if targets.numel() < 2:
        return 0.0
    var = float(targets.var())
    return 0.0 if var == 0.0 else 1.0 - float((targets - values).var()) / var


@dataclass
class PPOSchema:
    """The option ``estimator=ppo``: PPO with a learned critic, turn-level GAE (see ``PPO``). The policy gets a
    value head (the loss's ``value_coef`` and ``value_clip`` train it)."""

    _target_: str = "gigpo_lab.algorithm.ppo.PPO"
    #: gamma, the discount (verl's and RAGEN's algorithm.gamma: 1.0).
    gamma: float = param(1.0, low=0.0, high=1.0)
    #: lambda of GAE (verl's and RAGEN's algorithm.lam: 1.0; 0 = the one-step TD error).
    lam: float = param(1.0, low=0.0, high=1.0)
    #: true = whiten the advantages over the batch, as verl's compute_gae_advantage_return does; false = raw.
    whiten_advantages: bool = True
    #: p, subtracted from an invalid turn's reward before GAE (the critic-free estimators' default 0.1).
    invalid_action_penalty: float = param(INVALID_ACTION_PENALTY, low=0.0)


@register_estimator("ppo")
class PPO(Estimator):
    """PPO's advantage: turn-level GAE over the critic's ``values``, whitened over the batch.

    Parameters: ``PPOSchema``, one line each.
    """

    schema = PPOSchema

    @property
    def requires(self) -> tuple[str, ...]:
        return (*BASE_COLUMNS, "step_ids", "values")

    def gae(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
        """The raw GAE advantages and the critic's targets, (N,) float64 each."""
        rewards = rows.rewards - self.invalid_action_penalty * rows.invalid
        return turn_gae(rewards, rows.values, rows.traj, rows.layout, self.gamma, self.lam)

    def value_targets(self, rows: Rows) -> torch.Tensor:
        return self.gae(rows)[1]

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        raw, targets = self.gae(rows)
        adv = whiten(raw) if self.whiten_advantages else raw
        metrics = {
            **summary_metrics("adv/gae_", raw),
            **summary_metrics("adv/value_", rows.values),
            **summary_metrics("adv/target_", targets),
            "adv/explained_variance": explained_variance(rows.values, targets),
        }
        return adv, metrics


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/ppo": PPOSchema}
