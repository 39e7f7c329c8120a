"""gigpo: Group-in-Group Policy Optimization (Feng et al., 2025, arXiv 2505.10978).

ALGORITHMS.md, "gigpo"; verl-agent ``gigpo/core_gigpo.py`` (``compute_gigpo_outcome_advantage``)::

    A_i   = A^E_i + omega * A^S_i
    A^E_i = grpo's advantage (episode level), same mode and options
    G_t   = r_t + gamma * G_{t+1}              env rewards only, backwards over each trajectory
            (+ gamma^(T-t) * V_tail on an episode the time limit cut, only with bootstrap_truncated)
    A^S_i = norm(G_i - p_i) within the step group of row i    (the penalty p_i is not discounted)

A step group is the set of rows of one ``group_id`` with the same anchor (the raw current observation),
including repeats of a state inside one trajectory. Worked example, one group (ALGORITHMS.md)::

    A: s0 s1 s2        step groups: s0 = {A0, B0, C0}   s1 = {A1, B1, B2}
    B: s0 s1 s1 s3                  s2 = {A2, C1}       s3 = {B3}  (a singleton: A^S = 0 by default)
    C: s0 s2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import (
    BASE_COLUMNS,
    Estimator,
    Singleton,
    check_bootstrap_truncated,
    summary_metrics,
)
from gigpo_lab.algorithm.grouping import group_normalize, group_stats, pack
from gigpo_lab.algorithm.grpo import GRPOSchema, episode_advantages
from gigpo_lab.algorithm.placebo import placebo_keys, shuffle_step_groups
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.returns import discounted_returns, truncated_tail
from gigpo_lab.algorithm.settings import param
from gigpo_lab.algorithm.similarity import similarity_step_groups


def step_returns(rows: Rows, gamma: float, penalty: float, bootstrap_truncated: bool) -> torch.Tensor:
    """G_t - p_t (N,) float64: the discounted env-reward return (with a cut episode's tail when
    ``bootstrap_truncated``), then the row's undiscounted invalid-action penalty (verl-agent core_gigpo.py).
    The step level of gigpo and of hgpo's every history level."""
    returns = discounted_returns(rows.rewards, rows.traj, rows.layout, gamma)
    if bootstrap_truncated:
        returns = returns + truncated_tail(
            rows.rewards, rows.traj, rows.step, rows.layout, rows.truncated, gamma
        )
    return returns - penalty * rows.invalid


@dataclass
class GiGPOSchema(GRPOSchema):
    """The option ``estimator=gigpo``: episode-level GRPO + omega x step-level anchor groups (see ``GiGPO``)."""

    _target_: str = "gigpo_lab.algorithm.gigpo.GiGPO"
    #: omega, weight of the step-level advantage (paper: 1.0; 0 gives grpo exactly).
    step_advantage_weight: float = param(1.0, low=0.0)
    #: gamma, discount of the step return (paper: 0.95; verl-agent's own default is 1.0).
    gamma: float = param(0.95, low=0.0, high=1.0)
    #: zero | raw: a step group of one row gets 0 (ALGORITHMS.md) or its own return.
    step_singleton: Singleton = Singleton["zero"]
    #: null (exact anchor ids) or a difflib ratio for clustering text anchors (needs anchor_texts).
    anchor_similarity_threshold: Optional[float] = param(  # noqa: UP045
        None, low=0.0, high=1.0, low_open=True, high_open=True
    )
    #: false (the paper's and verl-agent's semantics, ALGORITHMS.md) = G_t stops where the episode stops.
    #: true = a lab variant, off by default: an episode that the time limit cut continues in G_t at its own
    #: mean step reward, V = mean / (1 - gamma) (partial-episode bootstrapping without a critic, Pardo et al.
    #: 2018; needs gamma < 1), so that a state's step group does not favour the visits made late in a cut
    #: episode when every step pays (docs/WHY_RUNS_FAIL.md, cause 6). A no-op, bit for bit, where cut episodes
    #: earn 0 a step (FrozenLake, Household, the paper's ALFWorld). GRPO has no step return, so no counterpart.
    bootstrap_truncated: bool = False
    #: false = the step groups of the anchors (the paper's). true = a control, off by default: inside each
    #: episode group the step groups keep their sizes and their rows are drawn at random (a hash of the batch
    #: and placebo_seed seeds the draw), so the step level carries no state information and whatever GiGPO
    #: gains over GRPO through it should vanish (docs/ALGORITHMS.md, "Controls").
    placebo: bool = False
    #: An int mixed into the placebo's draw with the batch's hash: another value, another random partition of
    #: the same batch. Read only with placebo=true.
    placebo_seed: int = 0


@register_estimator("gigpo")
class GiGPO(Estimator):
    """Episode-level GRPO advantage plus omega times a step-level advantage over anchor-state groups.

    Parameters: ``GiGPOSchema``, one line each.
    Note: with ``mode=mean_std_norm`` this is the paper's "GiGPO w/ std"; ``mean_norm`` is "w/o std".
    """

    schema = GiGPOSchema

    def check(self) -> None:
        check_bootstrap_truncated(self)

    @property
    def requires(self) -> tuple[str, ...]:
        anchors = "anchor_ids" if self.anchor_similarity_threshold is None else "anchor_texts"
        cut = ("truncated",) if self.bootstrap_truncated else ()
        return (*BASE_COLUMNS, "step_ids", anchors, *cut)

    def step_groups(self, rows: Rows) -> tuple[torch.Tensor, int]:
        """Step-group ids (N,) int64 in 0..S-1 and S: equal anchors inside one ``group_id`` (with ``placebo``:
        the same sizes, random members)."""
        if self.anchor_similarity_threshold is None:
            ids, n = pack(rows.group, rows.n_groups, rows.anchor)  # (group, anchor) pairs
        else:
            ids, n = similarity_step_groups(
                rows.anchor_texts, rows.group, rows.layout.position, self.anchor_similarity_threshold
            )
        if not self.placebo:
            return ids, n
        keys = placebo_keys(rows.traj_ids, rows.step, rows.rewards, rows.invalid, self.placebo_seed)
        return shuffle_step_groups(ids, n, rows.group, keys), n

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        episode = episode_advantages(rows, self)
        returns = step_returns(rows, self.gamma, self.invalid_action_penalty, self.bootstrap_truncated)
        step_group, n_step_groups = self.step_groups(rows)
        stats = group_stats(returns, step_group, n_step_groups, with_std=self.mode == "mean_std_norm")
        step = group_normalize(
            returns,
            step_group,
            n_step_groups,
            mode=self.mode,
            eps=self.epsilon,
            singleton=self.step_singleton,
            stats=stats,
        )
        adv = episode + self.step_advantage_weight * step
        metrics = {
            **summary_metrics("adv/episode_", episode),
            **summary_metrics("adv/step_", step),
            "adv/step_groups": float(n_step_groups),
            "adv/step_group_size": rows.n / n_step_groups,
            # a singleton step group holds one row, so singleton rows = singleton groups
            "adv/singleton_frac": int((stats.count == 1).sum()) / rows.n,
        }
        return adv, metrics


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/gigpo": GiGPOSchema}
