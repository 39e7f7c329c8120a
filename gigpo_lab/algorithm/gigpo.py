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
    SINGLETON_POLICIES,
    Estimator,
    Singleton,
    check_bool,
    check_bootstrap_truncated,
    check_choice,
    check_real,
    summary_metrics,
)
from gigpo_lab.algorithm.grouping import group_normalize, group_stats, pack
from gigpo_lab.algorithm.grpo import EPISODE_DEFAULTS, EpisodeLevel, GRPOSchema, episode_advantages
from gigpo_lab.algorithm.placebo import placebo_keys, shuffle_step_groups
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.returns import discounted_returns, truncated_tail
from gigpo_lab.algorithm.similarity import similarity_step_groups
from gigpo_lab.choices import default_of


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


@register_estimator("gigpo")
class GiGPO(Estimator):
    """Episode-level GRPO advantage plus omega times a step-level advantage over anchor-state groups.

    Args:
        step_advantage_weight: omega >= 0, the weight of A^S (default 1.0, the paper's; 0 gives grpo exactly).
        gamma: discount in [0, 1] of the step return G_t (default 0.95 as in the paper and verl-agent's
            GiGPO scripts; verl-agent's own default is 1.0).
        mode, normalize_over, invalid_action_penalty, epsilon, episode_singleton: as in ``GRPO`` (A^E);
            ``mode``, ``epsilon`` and the penalty also apply to A^S.
        step_singleton: a step group of one row gets ``zero`` (ALGORITHMS.md default) or ``raw`` (its
            return, mean 0 / std 1 substituted).
        anchor_similarity_threshold: None (exact anchor ids, the default) or a value in (0, 1): cluster the
            text anchors of each group by ``difflib`` ratio (needs ``anchor_texts``; see ``similarity.py``).
        bootstrap_truncated: false (ALGORITHMS.md: G_t stops at the episode's last step) or true: an
            episode that the time limit cut (the ``truncated`` column) continues, in G_t, at its own mean
            reward forever (``returns.truncated_tail``; needs gamma < 1). Without it, in an env that charges
            every step, a state visited late in a cut episode has a higher G_t than the same state visited
            early, so the step groups reward being late (docs/WHY_RUNS_FAIL.md, cause 6).
        placebo: false (the default) or true, a control: inside each episode group the step groups keep
            their sizes and their members are drawn at random (``placebo.py``), so A^S carries no state
            information. At omega = 0 it is grpo, as gigpo is.
        placebo_seed: an int mixed into the placebo's draw (with a hash of the batch); ignored without it.
    Note: with ``mode=mean_std_norm`` this is the paper's "GiGPO w/ std"; ``mean_norm`` is "w/o std".
    """

    def __init__(
        self,
        step_advantage_weight: float = 1.0,
        gamma: float = 0.95,
        mode: str = EPISODE_DEFAULTS.mode,
        normalize_over: str = EPISODE_DEFAULTS.normalize_over,
        invalid_action_penalty: float = EPISODE_DEFAULTS.invalid_action_penalty,
        epsilon: float = EPISODE_DEFAULTS.epsilon,
        episode_singleton: str = EPISODE_DEFAULTS.episode_singleton,
        step_singleton: str = "zero",
        anchor_similarity_threshold: float | None = None,
        bootstrap_truncated: bool = False,
        placebo: bool = False,
        placebo_seed: int = 0,
    ) -> None:
        name = self.name
        self.step_advantage_weight = check_real(name, "step_advantage_weight", step_advantage_weight, low=0.0)
        self.gamma = check_real(name, "gamma", gamma, low=0.0, high=1.0)
        self.episode = EpisodeLevel.checked(
            name,
            mode=mode,
            normalize_over=normalize_over,
            invalid_action_penalty=invalid_action_penalty,
            epsilon=epsilon,
            episode_singleton=episode_singleton,
        )
        self.step_singleton = check_choice(name, "step_singleton", step_singleton, SINGLETON_POLICIES)
        self.anchor_similarity_threshold = None
        if anchor_similarity_threshold is not None:
            self.anchor_similarity_threshold = check_real(
                name,
                "anchor_similarity_threshold",
                anchor_similarity_threshold,
                low=0.0,
                high=1.0,
                low_open=True,
                high_open=True,
            )
        self.bootstrap_truncated = check_bootstrap_truncated(name, bootstrap_truncated, self.gamma)
        self.placebo = check_bool(name, "placebo", placebo)
        if isinstance(placebo_seed, bool) or not isinstance(placebo_seed, int):
            raise TypeError(f"{name}: placebo_seed must be an int, got {placebo_seed!r}")
        self.placebo_seed = placebo_seed
        super().__init__(
            step_advantage_weight=self.step_advantage_weight,
            gamma=self.gamma,
            **vars(self.episode),
            step_singleton=self.step_singleton,
            anchor_similarity_threshold=self.anchor_similarity_threshold,
            bootstrap_truncated=self.bootstrap_truncated,
            placebo=self.placebo,
            placebo_seed=self.placebo_seed,
        )

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
        level = self.episode
        episode = episode_advantages(rows, level)
        returns = step_returns(rows, self.gamma, level.invalid_action_penalty, self.bootstrap_truncated)
        step_group, n_step_groups = self.step_groups(rows)
        stats = group_stats(returns, step_group, n_step_groups, with_std=level.mode == "mean_std_norm")
        step = group_normalize(
            returns,
            step_group,
            n_step_groups,
            mode=level.mode,
            eps=level.epsilon,
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


@dataclass
class GiGPOSchema(GRPOSchema):
    """The option ``estimator=gigpo``: episode-level GRPO + omega x step-level anchor groups (see ``GiGPO``)."""

    _target_: str = "gigpo_lab.algorithm.gigpo.GiGPO"
    #: omega >= 0, weight of the step-level advantage (paper: 1.0; 0 gives grpo exactly).
    step_advantage_weight: float = default_of(GiGPO, "step_advantage_weight")  # type: ignore[assignment]
    #: gamma in [0, 1], discount of the step return (paper: 0.95; verl-agent's own default is 1.0).
    gamma: float = default_of(GiGPO, "gamma")  # type: ignore[assignment]
    #: zero | raw: a step group of one row gets 0 (ALGORITHMS.md) or its own return.
    step_singleton: Singleton = Singleton[default_of(GiGPO, "step_singleton")]
    #: null (exact anchor ids) or a difflib ratio in (0, 1) for clustering text anchors (needs anchor_texts).
    anchor_similarity_threshold: Optional[float] = default_of(GiGPO, "anchor_similarity_threshold")  # noqa: UP045
    #: false (the paper's and verl-agent's semantics, ALGORITHMS.md) = G_t stops where the episode stops.
    #: true = a lab variant, off by default: an episode that the time limit cut continues in G_t at its own
    #: mean step reward, V = mean / (1 - gamma) (partial-episode bootstrapping without a critic, Pardo et al.
    #: 2018; needs gamma < 1), so that a state's step group does not favour the visits made late in a cut
    #: episode when every step pays (docs/WHY_RUNS_FAIL.md, cause 6). A no-op, bit for bit, where cut episodes
    #: earn 0 a step (FrozenLake, Household, the paper's ALFWorld). GRPO has no step return, so no counterpart.
    bootstrap_truncated: bool = default_of(GiGPO, "bootstrap_truncated")  # type: ignore[assignment]
    #: false = the step groups of the anchors (the paper's). true = a control, off by default: inside each
    #: episode group the step groups keep their sizes and their rows are drawn at random (a hash of the batch
    #: and placebo_seed seeds the draw), so the step level carries no state information and whatever GiGPO
    #: gains over GRPO through it should vanish (docs/ALGORITHMS.md, "Controls").
    placebo: bool = default_of(GiGPO, "placebo")  # type: ignore[assignment]
    #: An int mixed into the placebo's draw with the batch's hash: another value, another random partition of
    #: the same batch. Read only with placebo=true.
    placebo_seed: int = default_of(GiGPO, "placebo_seed")  # type: ignore[assignment]


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/gigpo": GiGPOSchema}
