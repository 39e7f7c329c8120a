"""hgpo: Hierarchy-of-Groups Policy Optimization (He, Feng et al., ICLR 2026, arXiv 2602.22817).

ALGORITHMS.md, "hgpo". Semantics pinned from the recipe's code, ``recipe/hgpo/core_hgpo.py``
(``hgpo_advantage_estimate``, the clusters loop, ``aggregate_items``, ``trajectory_advantages``), its call in
``recipe/hgpo/hgpo_ray_trainer.py`` (``compute_advantage``, branch ``AdvantageEstimator.HGPO``) and its run
scripts ``recipe/hgpo/run_qwen2.5_1.5b_alfworld_train.sh`` (history_length=2, mode=mean_std_norm,
length_weight_alpha=1.0, base_group=False, gamma=0.95). The langfengQ/verl-agent tree itself was not
available here; the recipe was read in copies that carry it verbatim (zzj1111/alfworldauto and
OliverLeeXZ/SERL, ``recipe/hgpo/``). Paper notation: levels k = 0..K, groups G_0 ⊇ G_1 ⊇ … ⊇ G_K::

    G_t     = r_t + gamma * G_{t+1} - p_t              GiGPO's step return (env rewards, undiscounted penalty)
    key_k(i)= (group_id, s_t, s_{t-1}, …, s_{t-k})     row i = (trajectory, t); defined only when t >= k
    G_k(i)  = the rows of i's key_k                     level 0 = GiGPO's anchor-state step group
    a_k(i)  = norm(G_i) over G_k(i)                     only when |G_k(i)| >= 2; mean_norm or mean_std_norm
    w_k     = (k + 2) ** alpha                          the recipe's L ** alpha, L = (anchors in the key) + 1
    A^H_i   = sum_k w_k a_k(i) / sum_k w_k              over the levels with a_k(i) defined and != 0; else 0

What the recipe does, each point followed here (line numbers of ``core_hgpo.py`` at the read copy):

- the key is the sequence of **anchors** (``anchor_obs``, the raw states) ending at the row, within one
  episode group (``uid``): ``clusters[(k, tuple(traj_h[ti][si - k + 1 : si + 1]))]``; actions are not in it;
- a row with fewer than k previous steps (t < k) is in no level-k group (``k_upper = min(max_k, si + 1)``);
- groups of one row give no item (``if nL <= 1: continue``); the std is the population std
  (``r.std(unbiased=False)``), ``(r - mean) / (std + eps)`` or ``r - mean``;
- items equal to 0 are dropped before weighting (``valid_mask = advs != 0``), so a level in which the row sits
  at its group's mean does not pull the value toward 0; no item left gives 0. The rule is discontinuous: a
  row that sits at its group's mean in exact arithmetic can get a rounding residue (1e-16) and count as an
  item, and the rounding depends on the order of the sums (rewards 1, -1, 8.8e-84 summed in two row orders
  give a mean of 0 or 4.4e-85). Kept as the recipe has it; on exact returns (round rewards, gamma 0.5 or 1)
  the result does not depend on the row order;
- weights ``L ** alpha`` normalised as ``w / (w.sum() + epsilon)``. **Deviation:** the lab divides by
  ``w.sum()`` alone (every w >= 1 when alpha >= 0), a relative difference of eps / sum(w) <= 5e-7, so that
  K = 0 is GiGPO's step level bit for bit;
- the episode term: with ``base_group=False`` (the published runs) there is none, A = A^H
  (``episode_level: none``, this class's default); with ``base_group=True`` GiGPO's episode advantage enters
  the weighted mean as one more item of weight 1 ** alpha = 1 (``episode_level: weighted``). The lab adds
  ``episode_level: add``: A = A^E + omega * A^H, GiGPO's composition; with ``history_length: 0`` and
  ``population_std: false`` that is ``gigpo`` exactly (tests/algorithm/test_hgpo.py).

Context in the lab. The tiny policy's prompt (``gigpo_lab/policy/tiny.py``) holds the current anchor and
the last ``model.history_window`` *actions* (and, with ``mark_unchanged``, whether each left the state as it
was); the HF policies hold the last ``history_window`` (observation, action) turns. The anchor is the
current state alone, so GiGPO's step groups (level 0) mix rows whose prompts differ: the paper's "context
inconsistency". HGPO's level k adds the last k *anchors*; K = ``history_length`` should equal
``model.history_window`` (both default to 2, the recipe's value) so that the deepest level covers the
prompt's window; a run that changes one sets the other. Two rows that share their last
K anchors but reached them by different actions (two moves into the same wall) still share a group here,
as in the recipe, which keys on states only; grouping on actions too would need an action-id column in
``StepBatch.columns()``.

Vectorised: the nested groups come from one sort of the deepest key (``history_groups.py``), and the
statistics are segment sums over the rows that can carry an item at each level (defined, in a group of two or
more; ``level_segments``). A Python loop runs over the K + 1 levels only. The weighted mean adds its items
in order, level 0 first (A^E first under ``weighted``); with up to four levels that is also the order of a
torch sum over the stacked (levels, N) items, and with five or more such a sum can differ in the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import BASE_COLUMNS, Estimator, Mode, check_bootstrap_truncated, summary_metrics
from gigpo_lab.algorithm.gigpo import step_returns
from gigpo_lab.algorithm.grouping import group_stats, segment_sum
from gigpo_lab.algorithm.grpo import GRPOSchema, episode_advantages
from gigpo_lab.algorithm.history_groups import HistoryLevel, history_levels, level_segments
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param
from gigpo_lab.choices import choice_enum

#: How the episode-level advantage A^E enters (module docstring): not at all (the recipe's
#: base_group=False), as one more weighted item of weight 1 (base_group=True), or added as in GiGPO.
EPISODE_LEVELS: tuple[str, ...] = ("none", "weighted", "add")
EpisodeLevelChoice = choice_enum("EpisodeLevelChoice", EPISODE_LEVELS, __name__)


@dataclass
class HGPOSchema(GRPOSchema):
    """The option ``estimator=hgpo``: nested history groups, adaptive weights (see ``HGPO``)."""

    _target_: str = "gigpo_lab.algorithm.hgpo.HGPO"
    #: K, the deepest level: rows that share their anchor and their last K anchors; keep it equal to
    #: model.history_window (both 2 by default). 0 = GiGPO's anchor-state step groups only.
    history_length: int = param(2, low=0)
    #: alpha: level k weighs (k + 2)^alpha, the episode item 1; 0 = uniform (recipe: 1.0).
    length_weight_alpha: float = param(1.0, low=0.0)
    #: none | weighted | add: no episode term (the recipe's default), A^E as one item of weight 1 (the
    #: recipe's base_group), or A = A^E + omega * A^H (GiGPO's composition).
    episode_level: EpisodeLevelChoice = EpisodeLevelChoice["none"]
    #: omega, the weight of A^H under episode_level=add.
    step_advantage_weight: float = param(1.0, low=0.0)
    #: true = the recipe's std over n at the step levels; false = unbiased (n - 1), as GiGPO.
    population_std: bool = True
    #: gamma, discount of the step return (recipe's scripts: 0.95).
    gamma: float = param(0.95, low=0.0, high=1.0)
    #: mean_norm | mean_std_norm, at every level and in A^E (recipe's scripts: mean_std_norm).
    mode: Mode = Mode["mean_std_norm"]
    #: as gigpo's: a cut episode's G_t continues at its mean reward (a lab variant, off by default).
    bootstrap_truncated: bool = False


@register_estimator("hgpo")
class HGPO(Estimator):
    """Step advantages from nested history groups (same anchor, same last k anchors), weighted by depth.

    Parameters: ``HGPOSchema``, one line each. Keep ``history_length`` equal to ``model.history_window``
    (module docstring); K = 0 is GiGPO's step level.
    """

    schema = HGPOSchema

    def check(self) -> None:
        check_bootstrap_truncated(self)

    @property
    def requires(self) -> tuple[str, ...]:
        cut = ("truncated",) if self.bootstrap_truncated else ()
        return (*BASE_COLUMNS, "step_ids", "anchor_ids", *cut)

    def level_items(
        self, levels: list[HistoryLevel], returns: torch.Tensor
    ) -> list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]]:
        """Per level k: (its rows (M,) in the levels' order or None for all N, a_k (M,) float64 set to 0 off
        the items, the item mask (M,) bool: defined, in a group of two or more, and != 0), from the nested
        groups ``levels`` and the step returns (N,) in the levels' row order."""
        import torch

        out = []
        for seg in level_segments(levels):
            values = returns if seg.rows is None else returns.index_select(0, seg.rows)
            a = self.normalized(values, seg.ids, seg.num)
            item = a != 0 if seg.kept is None else seg.kept & (a != 0)
            out.append((seg.rows, torch.where(item, a, torch.zeros_like(a)), item))
        return out

    def normalized(self, values: torch.Tensor, seg: torch.Tensor, num: int) -> torch.Tensor:
        """a (N,), each of ``values`` (N,) normalised in its segment ``seg`` (N,) in 0..num-1: ``group_stats``
        then ``group_normalize`` (singleton ``zero``, own statistics) bit for bit, the deviation from the
        mean computed once; the std over n (population) or n - 1 (``population_std``)."""
        import torch

        count, mean, _ = group_stats(values, seg, num, with_std=False)
        dev = values - mean.index_select(0, seg)  # group_normalize's numerator, and the std's deviations
        if self.mode != "mean_std_norm":
            return dev
        n = count if self.population_std else count - 1
        var = segment_sum(dev * dev, seg, num) / n.clamp(min=1).to(values.dtype)
        std = torch.where(count > 1, var.sqrt(), torch.zeros_like(var))
        return dev / (std + self.epsilon).index_select(0, seg)

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        returns = step_returns(rows, self.gamma, self.invalid_action_penalty, self.bootstrap_truncated)
        order, history = history_levels(rows, self.history_length)  # levels in one row order
        levels = self.level_items(history, returns.index_select(0, order))
        weight = (torch.arange(len(levels), dtype=torch.float64) + 2.0).pow(self.length_weight_alpha)
        # (at, a, w_k on the items and 0 elsewhere) per level, each (M,) over the level's rows ``at``
        parts = [
            (at, a, item.to(torch.float64) * w)
            for (at, a, item), w in zip(levels, weight.tolist(), strict=True)
        ]
        episode = None
        if self.episode_level != "none":
            episode = episode_advantages(rows, self)
        if self.episode_level == "weighted":  # the recipe's base_group: one item of weight 1 ** alpha = 1
            ordered = episode.index_select(0, order)
            has = ordered != 0
            parts.insert(
                0, (None, torch.where(has, ordered, torch.zeros_like(ordered)), has.to(torch.float64))
            )
        # A^H = sum_k (w_k / W) a_k with W = sum_k w_k over the row's items (the recipe's aggregate_items),
        # each sum taken in item order, level by level over the level's rows
        total = torch.zeros_like(returns)
        for at, _, item_weight in parts:
            _accumulate(total, at, item_weight)
        total = torch.where(total > 0, total, torch.ones_like(total))
        step = torch.zeros_like(returns)
        for at, a, item_weight in parts:
            share = item_weight / (total if at is None else total.index_select(0, at))
            _accumulate(step, at, share * a)
        step = torch.empty_like(returns).scatter_(0, order, step)  # back in batch order
        adv = step if self.episode_level != "add" else episode + self.step_advantage_weight * step
        metrics = {**summary_metrics("adv/step_", step), "adv/step_groups": float(history[0].groups)}
        for k, (_, _, item) in enumerate(levels):  # groups of level k, and the share of rows it credits
            metrics[f"adv/level{k}_groups"] = float(history[k].groups)
            metrics[f"adv/level{k}_frac"] = float(item.sum()) / rows.n
        if episode is not None:
            metrics.update(summary_metrics("adv/episode_", episode))
        return adv, metrics


def _accumulate(out: torch.Tensor, at: torch.Tensor | None, values: torch.Tensor) -> None:
    """out (N,) += values (N,) when ``at`` is None, else out[at] += values (M,) (``at`` distinct)."""
    if at is None:
        out.add_(values)
    else:
        out.index_add_(0, at, values)


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/hgpo": HGPOSchema}
