"""graphgpo: graph-based step credit (Cheng, He, Feng et al., ICML 2026, arXiv 2605.26684).

docs/ALGORITHMS.md, "GraphGPO". The semantics are the recipe's README and config, floatingstarZ/verl-agent at
commit 113f665: ``recipe/GraphGPO/README.md`` ("Key Idea", "Core algorithm parameters") and
``recipe/GraphGPO/config/graphgpo_trainer.yaml`` (``algorithm.gamma: 0.10``, ``algorithm.graphgpo``). Its
code was not read; the lab's choices where those two are silent are options, listed in ALGORITHMS.md::

    graph    per group: state -> next state of every row; a successful last step -> the goal (transition_graph.py)
    d(s)     the unit-length distance from state s to its group's goal (reverse BFS); inf if none
    G_i      = goal_return * gamma ** d(s'_i)                        s'_i the state row i led to
             = goal_return * gamma ** (d(s'_i) - d(s_i) + 1)        with normalize_distance (rewards progress)
             = unreachable_return                                    where d(s'_i) = inf
    A^S_i    = norm(G_i - p_i) within the step group of row i (same state, inside the group), as GiGPO's
    A_i      = episode_advantage_weight * A^E_i + step_advantage_weight * A^S_i    A^E = grpo's advantage

Worked example (ALGORITHMS.md, defaults gamma = 0.1, goal_return = 10): A: s0 s1 s2 -> goal, B: s0 s1 s1 s3
(fails), C: s0 s2 -> goal. d: s2 1, s1 2, s0 2 (C's shortcut), s3 inf. G: A 0.1 1 10, B 0.1 0.1-p 0 0,
C 1 10. In s0, A0 and B0 took the same step s0 -> s1 and get the same credit, whatever happened later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.base import BASE_COLUMNS, Estimator, Mode, Singleton, summary_metrics
from gigpo_lab.algorithm.grouping import group_normalize, group_stats, pack
from gigpo_lab.algorithm.grpo import GRPOSchema, episode_advantages
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.settings import param
from gigpo_lab.algorithm.similarity import similarity_step_groups
from gigpo_lab.algorithm.transition_graph import (
    UNREACHABLE,
    Transitions,
    distinct_edges,
    goal_distances,
    transitions,
)
from gigpo_lab.choices import choice_enum

#: Which episodes reached the goal, read from the batch (the env's info["success"] is not a batch column):
#: the last row terminated (not cut by the time limit) with a reward > 0 (gym_discrete's default success_on,
#: FrozenLake, Taxi), or any termination (CliffWalking, whose goal step pays -1).
SUCCESS_ON: tuple[str, ...] = ("terminated_positive", "terminated")
#: Where the last step of an episode that the time limit cut leads: a dead end (d = inf), or its own state.
CUT_ENDS: tuple[str, ...] = ("dead_end", "stay")
#: What enters a step group's statistics: every row (GiGPO's) or each distinct transition once.
COUNT_TRANSITIONS: tuple[str, ...] = ("rows", "edges")
SuccessOn = choice_enum("SuccessOn", SUCCESS_ON, __name__)
CutEnd = choice_enum("CutEnd", CUT_ENDS, __name__)
CountTransitions = choice_enum("CountTransitions", COUNT_TRANSITIONS, __name__)


@dataclass
class GraphGPOSchema(GRPOSchema):
    """The option ``estimator=graphgpo``: episode-level GRPO + graph-distance step groups (see ``GraphGPO``)."""

    _target_: str = "gigpo_lab.algorithm.graphgpo.GraphGPO"
    #: mean_norm | mean_std_norm, at both levels (the recipe's config: mean_std_norm).
    mode: Mode = Mode["mean_std_norm"]
    #: Weight of the graph step advantage A^S (the recipe's step_advantage_w: 1.0; 0 = A^E alone).
    step_advantage_weight: float = param(1.0, low=0.0)
    #: Weight of the episode advantage A^E (the recipe's episode_advantage_w: 1.0; 0 = the graph alone).
    episode_advantage_weight: float = param(1.0, low=0.0)
    #: Decay of the distance return goal_return * gamma^d (the recipe's algorithm.gamma: 0.10).
    gamma: float = param(0.10, low=0.0, high=1.0)
    #: false: G = goal_return * gamma^d(next state) (proximity, the recipe's default); true: gamma^(d(next) -
    #: d(state) + 1), progress toward the goal (a step that closes one unit of distance earns goal_return).
    normalize_distance: bool = False
    #: The return of a step into the goal: the recipe's 10, verl-agent's success reward. Under mean_std_norm
    #: it cancels (up to epsilon); under mean_norm set it to the env's success reward after trainer.reward_clip
    #: (1 on FrozenLake) to keep A^S on A^E's scale.
    goal_return: float = param(10.0, low=0.0, low_open=True)
    #: The return of a step whose next state has no path to its group's goal (a lab choice; 0 = gamma^inf).
    unreachable_return: float = param(0.0)
    #: terminated_positive | terminated: an episode reached the goal when its last row was not cut by the time
    #: limit and paid a reward > 0 (FrozenLake, Taxi), or when it was not cut at all (CliffWalking).
    success_on: SuccessOn = SuccessOn["terminated_positive"]
    #: dead_end | stay: the last step of an episode the time limit cut leads to a state with no path to the goal
    #: (the reading of a state never seen again), or stays in its own state (no progress). A failed episode the
    #: env terminated always leads to a dead end.
    cut_end: CutEnd = CutEnd["dead_end"]
    #: rows | edges: every row of a step group enters its mean and std (GiGPO's, the README's), or each distinct
    #: transition (state, next state) once, so eight rows repeating one step weigh as one.
    count_transitions: CountTransitions = CountTransitions["rows"]
    #: zero | raw: a step group with one statistics entry gets 0 (GiGPO's default) or its own return.
    step_singleton: Singleton = Singleton["zero"]
    #: null (exact anchors) or a difflib ratio: similar text anchors are one graph node and one step
    #: group (the recipe's enable_similarity=true with similarity_thresh, 0.95 there; needs anchor_texts).
    anchor_similarity_threshold: Optional[float] = param(  # noqa: UP045
        None, low=0.0, high=1.0, low_open=True, high_open=True
    )


@register_estimator("graphgpo")
class GraphGPO(Estimator):
    """Episode-level GRPO plus a step level whose returns are graph distances to the goal.

    Parameters: ``GraphGPOSchema``, one line each.
    """

    schema = GraphGPOSchema
    optional = ("invalid", "truncated")

    @property
    def requires(self) -> tuple[str, ...]:
        anchors = "anchor_ids" if self.anchor_similarity_threshold is None else "anchor_texts"
        return (*BASE_COLUMNS, "step_ids", anchors)

    def graph(self, rows: Rows) -> tuple[Transitions, int]:
        """Every row's transition (``transition_graph.transitions``) and S, the number of states."""
        import torch

        if self.anchor_similarity_threshold is None:
            node, n_states = pack(rows.group, rows.n_groups, rows.anchor)  # (group, anchor) pairs
        else:
            node, n_states = similarity_step_groups(
                rows.anchor_texts, rows.group, rows.layout.position, self.anchor_similarity_threshold
            )
        is_last = rows.step == rows.layout.length.index_select(0, rows.traj) - 1
        cut = torch.zeros_like(is_last) if rows.truncated is None else rows.truncated & is_last
        ended = is_last & ~cut  # the env terminated the episode here
        success = ended & (rows.rewards > 0) if self.success_on == "terminated_positive" else ended
        stay = cut if self.cut_end == "stay" else torch.zeros_like(cut)
        graph = transitions(
            node, n_states, rows.group, rows.n_groups, rows.layout.position, is_last, success, stay
        )
        return graph, n_states

    def distance_returns(self, graph: Transitions, d: torch.Tensor) -> torch.Tensor:
        """G (N,) float64 before the penalty: goal_return * gamma^exponent, or unreachable_return."""
        import torch

        after = d.index_select(0, graph.next_node)
        exponent = after - d.index_select(0, graph.node) + 1 if self.normalize_distance else after
        reachable = after < UNREACHABLE  # then d(s) <= d(s') + 1 (an edge s -> s'), so exponent >= 0
        exponent = torch.where(reachable, exponent, torch.zeros_like(exponent)).to(torch.float64)
        base = torch.full_like(exponent, self.gamma)
        value = self.goal_return * torch.pow(base, exponent)
        return torch.where(reachable, value, torch.full_like(value, self.unreachable_return))

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        graph, n_states = self.graph(rows)
        source, target = distinct_edges(graph)
        goals = torch.arange(n_states, n_states + rows.n_groups, device=source.device)
        d, levels = goal_distances(source, target, goals, graph.n_nodes)
        plain = self.distance_returns(graph, d)
        returns = plain - self.invalid_action_penalty * rows.invalid
        with_std = self.mode == "mean_std_norm"
        stat_values = stat_segment = None
        if self.count_transitions == "edges":  # one entry per distinct (state, next state) of each step group
            pair, n_pairs = pack(graph.node, graph.n_nodes, graph.next_node)
            stat_values = torch.empty(n_pairs, dtype=plain.dtype, device=plain.device).scatter_(
                0, pair, plain
            )
            stat_segment = torch.empty(n_pairs, dtype=pair.dtype, device=pair.device).scatter_(
                0, pair, graph.node
            )
            stats = group_stats(stat_values, stat_segment, n_states, with_std=with_std)
        else:
            stats = group_stats(returns, graph.node, n_states, with_std=with_std)
        step = group_normalize(
            returns, graph.node, n_states, mode=self.mode, eps=self.epsilon, singleton=self.step_singleton,
            stat_values=stat_values, stat_segment=stat_segment, stats=stats,
        )  # fmt: skip
        episode = episode_advantages(rows, self)
        adv = self.episode_advantage_weight * episode + self.step_advantage_weight * step
        metrics = {
            **summary_metrics("adv/episode_", episode),
            **summary_metrics("adv/step_", step),
            "adv/step_groups": float(n_states),
            "adv/step_group_size": rows.n / n_states,
            "adv/singleton_frac": float((stats.count.index_select(0, graph.node) == 1).double().mean()),
            "adv/graph_edges": float(source.numel()),
            "adv/bfs_levels": float(levels),
            "adv/reachable_frac": float((d.index_select(0, graph.next_node) < UNREACHABLE).double().mean()),
        }
        return adv, metrics


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/graphgpo": GraphGPOSchema}
