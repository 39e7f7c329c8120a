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
from typing import Optional

import torch

from gigpo_lab.algorithm.base import (
    BASE_COLUMNS,
    SINGLETON_POLICIES,
    Estimator,
    Mode,
    Singleton,
    check_bool,
    check_choice,
    check_real,
    summary_metrics,
)
from gigpo_lab.algorithm.grouping import group_normalize, group_stats, pack
from gigpo_lab.algorithm.grpo import EPISODE_DEFAULTS, EpisodeLevel, GRPOSchema, episode_advantages
from gigpo_lab.algorithm.prepare import Rows
from gigpo_lab.algorithm.registry import register_estimator
from gigpo_lab.algorithm.similarity import similarity_step_groups
from gigpo_lab.algorithm.transition_graph import (
    UNREACHABLE,
    Transitions,
    distinct_edges,
    goal_distances,
    transitions,
)
from gigpo_lab.choices import choice_enum, default_of

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


@register_estimator("graphgpo")
class GraphGPO(Estimator):
    """Episode-level GRPO plus a step level whose returns are graph distances to the goal.

    Args:
        step_advantage_weight: >= 0, the weight of A^S (the recipe's ``step_advantage_w``, 1.0).
        episode_advantage_weight: >= 0, the weight of A^E (the recipe's ``episode_advantage_w``, 1.0;
            0 = the graph signal alone).
        gamma: in [0, 1], the decay of the distance return (the recipe's ``algorithm.gamma``, 0.10).
        normalize_distance: false: G = goal_return * gamma^d(s'); true: gamma^(d(s') - d(s) + 1), progress
            rather than proximity (the recipe's key, false).
        goal_return: > 0, the return of a step into the goal (the recipe's 10, verl-agent's success reward).
        unreachable_return: the return of a step whose next state cannot reach the goal (0 = gamma^inf).
        success_on: ``terminated_positive`` or ``terminated``: which last rows lead to the goal (SUCCESS_ON).
        cut_end: ``dead_end`` or ``stay``: where the last row of a time-limit-cut episode leads (CUT_ENDS).
        count_transitions: ``rows`` (GiGPO's statistics) or ``edges`` (each distinct transition once).
        mode: ``mean_std_norm`` (the recipe's) or ``mean_norm``, at both levels.
        normalize_over, invalid_action_penalty, epsilon, episode_singleton: as in ``GRPO`` (A^E); the penalty
            p_i is also subtracted from the row's step return (as GiGPO's), and epsilon applies to A^S.
        step_singleton: a step group with one statistics entry gets ``zero`` (GiGPO's default) or ``raw``.
        anchor_similarity_threshold: None (exact anchors) or a difflib ratio in (0, 1): similar text anchors
            are one state, node and step group alike (the recipe's ``enable_similarity`` with
            ``similarity_thresh``, 0.95 there).
    """

    optional = ("invalid", "truncated")

    def __init__(
        self,
        step_advantage_weight: float = 1.0,
        episode_advantage_weight: float = 1.0,
        gamma: float = 0.10,
        normalize_distance: bool = False,
        goal_return: float = 10.0,
        unreachable_return: float = 0.0,
        success_on: str = "terminated_positive",
        cut_end: str = "dead_end",
        count_transitions: str = "rows",
        mode: str = "mean_std_norm",
        normalize_over: str = EPISODE_DEFAULTS.normalize_over,
        invalid_action_penalty: float = EPISODE_DEFAULTS.invalid_action_penalty,
        epsilon: float = EPISODE_DEFAULTS.epsilon,
        episode_singleton: str = EPISODE_DEFAULTS.episode_singleton,
        step_singleton: str = "zero",
        anchor_similarity_threshold: float | None = None,
    ) -> None:
        name = self.name
        self.step_advantage_weight = check_real(name, "step_advantage_weight", step_advantage_weight, low=0.0)
        self.episode_advantage_weight = check_real(
            name, "episode_advantage_weight", episode_advantage_weight, low=0.0
        )
        self.gamma = check_real(name, "gamma", gamma, low=0.0, high=1.0)
        self.normalize_distance = check_bool(name, "normalize_distance", normalize_distance)
        self.goal_return = check_real(name, "goal_return", goal_return, low=0.0, low_open=True)
        self.unreachable_return = check_real(name, "unreachable_return", unreachable_return)
        self.success_on = check_choice(name, "success_on", success_on, SUCCESS_ON)
        self.cut_end = check_choice(name, "cut_end", cut_end, CUT_ENDS)
        self.count_transitions = check_choice(name, "count_transitions", count_transitions, COUNT_TRANSITIONS)
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
                name, "anchor_similarity_threshold", anchor_similarity_threshold,
                low=0.0, high=1.0, low_open=True, high_open=True,
            )  # fmt: skip
        super().__init__(
            step_advantage_weight=self.step_advantage_weight,
            episode_advantage_weight=self.episode_advantage_weight,
            gamma=self.gamma,
            normalize_distance=self.normalize_distance,
            goal_return=self.goal_return,
            unreachable_return=self.unreachable_return,
            success_on=self.success_on,
            cut_end=self.cut_end,
            count_transitions=self.count_transitions,
            **vars(self.episode),
            step_singleton=self.step_singleton,
            anchor_similarity_threshold=self.anchor_similarity_threshold,
        )

    @property
    def requires(self) -> tuple[str, ...]:
        anchors = "anchor_ids" if self.anchor_similarity_threshold is None else "anchor_texts"
        return (*BASE_COLUMNS, "step_ids", anchors)

    def graph(self, rows: Rows) -> tuple[Transitions, int]:
        """Every row's transition (``transition_graph.transitions``) and S, the number of states."""
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
        after = d.index_select(0, graph.next_node)
        exponent = after - d.index_select(0, graph.node) + 1 if self.normalize_distance else after
        reachable = after < UNREACHABLE  # then d(s) <= d(s') + 1 (an edge s -> s'), so exponent >= 0
        exponent = torch.where(reachable, exponent, torch.zeros_like(exponent)).to(torch.float64)
        base = torch.full_like(exponent, self.gamma)
        value = self.goal_return * torch.pow(base, exponent)
        return torch.where(reachable, value, torch.full_like(value, self.unreachable_return))

    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        level = self.episode
        graph, n_states = self.graph(rows)
        source, target = distinct_edges(graph)
        goals = torch.arange(n_states, n_states + rows.n_groups, device=source.device)
        d, levels = goal_distances(source, target, goals, graph.n_nodes)
        plain = self.distance_returns(graph, d)
        returns = plain - level.invalid_action_penalty * rows.invalid
        with_std = level.mode == "mean_std_norm"
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
            returns, graph.node, n_states, mode=level.mode, eps=level.epsilon, singleton=self.step_singleton,
            stat_values=stat_values, stat_segment=stat_segment, stats=stats,
        )  # fmt: skip
        episode = episode_advantages(rows, level)
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


@dataclass
class GraphGPOSchema(GRPOSchema):
    """The option ``estimator=graphgpo``: episode-level GRPO + graph-distance step groups (see ``GraphGPO``)."""

    _target_: str = "gigpo_lab.algorithm.graphgpo.GraphGPO"
    #: mean_norm | mean_std_norm, at both levels (the recipe's config: mean_std_norm).
    mode: Mode = Mode[default_of(GraphGPO, "mode")]
    #: >= 0, weight of the graph step advantage A^S (the recipe's step_advantage_w: 1.0; 0 = A^E alone).
    step_advantage_weight: float = default_of(GraphGPO, "step_advantage_weight")  # type: ignore[assignment]
    #: >= 0, weight of the episode advantage A^E (the recipe's episode_advantage_w: 1.0; 0 = the graph alone).
    episode_advantage_weight: float = default_of(GraphGPO, "episode_advantage_weight")  # type: ignore[assignment]
    #: in [0, 1], decay of the distance return goal_return * gamma^d (the recipe's algorithm.gamma: 0.10).
    gamma: float = default_of(GraphGPO, "gamma")  # type: ignore[assignment]
    #: false: G = goal_return * gamma^d(next state) (proximity, the recipe's default); true: gamma^(d(next) -
    #: d(state) + 1), progress toward the goal (a step that closes one unit of distance earns goal_return).
    normalize_distance: bool = default_of(GraphGPO, "normalize_distance")  # type: ignore[assignment]
    #: > 0, the return of a step into the goal: the recipe's 10, verl-agent's success reward. Under mean_std_norm
    #: it cancels (up to epsilon); under mean_norm set it to the env's success reward after trainer.reward_clip
    #: (1 on FrozenLake) to keep A^S on A^E's scale.
    goal_return: float = default_of(GraphGPO, "goal_return")  # type: ignore[assignment]
    #: The return of a step whose next state has no path to its group's goal (a lab choice; 0 = gamma^inf).
    unreachable_return: float = default_of(GraphGPO, "unreachable_return")  # type: ignore[assignment]
    #: terminated_positive | terminated: an episode reached the goal when its last row was not cut by the time
    #: limit and paid a reward > 0 (FrozenLake, Taxi), or when it was not cut at all (CliffWalking).
    success_on: SuccessOn = SuccessOn[default_of(GraphGPO, "success_on")]
    #: dead_end | stay: the last step of an episode the time limit cut leads to a state with no path to the goal
    #: (the reading of a state never seen again), or stays in its own state (no progress). A failed episode the
    #: env terminated always leads to a dead end.
    cut_end: CutEnd = CutEnd[default_of(GraphGPO, "cut_end")]
    #: rows | edges: every row of a step group enters its mean and std (GiGPO's, the README's), or each distinct
    #: transition (state, next state) once, so eight rows repeating one step weigh as one.
    count_transitions: CountTransitions = CountTransitions[default_of(GraphGPO, "count_transitions")]
    #: zero | raw: a step group with one statistics entry gets 0 (GiGPO's default) or its own return.
    step_singleton: Singleton = Singleton[default_of(GraphGPO, "step_singleton")]
    #: null (exact anchors) or a difflib ratio in (0, 1): similar text anchors are one graph node and one step
    #: group (the recipe's enable_similarity=true with similarity_thresh, 0.95 there; needs anchor_texts).
    anchor_similarity_threshold: Optional[float] = default_of(GraphGPO, "anchor_similarity_threshold")  # noqa: UP045


#: This module's option of the ``estimator`` group (``gigpo_lab.discovery`` collects it).
SCHEMAS: dict[str, type] = {"estimator/graphgpo": GraphGPOSchema}
