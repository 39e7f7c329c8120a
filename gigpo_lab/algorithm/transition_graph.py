"""GraphGPO's state-transition graph: one graph per episode group, and every state's distance to the goal.

docs/ALGORITHMS.md, "GraphGPO"; the recipe's README (floatingstarZ/verl-agent, commit 113f665,
``recipe/GraphGPO/README.md``, "Key Idea" 2-3): a graph per task group from the observed transitions, the
successful terminal transition leading to a goal node, and a reverse shortest-path search from the goal.

Nodes. The S states of the batch are its step groups (equal anchors, or similar ones, inside one group), ids
0..S-1; group g adds a goal node S + g and a dead-end node S + K + g (K groups), which no edge leaves. Every
row is one transition, ``node -> next_node``::

    row (j, t), t < T_j - 1            -> the node of row (j, t + 1)
    last row of a successful episode   -> the goal of its group
    last row of a failed episode       -> the dead end of its group; with ``cut_end="stay"``, a row the time
                                          limit cut leads to its own node (the estimator never sees the state
                                          the env moved to)

Distances. Edges have unit length, so a breadth-first search from the goals is exact, and since no edge
joins two groups, one multi-source search over the whole batch gives every group's own distances. It runs
level by level on the distinct edges (``pack`` of (node, next node)), vectorised: level k drops every edge whose source
is visited, then marks the sources of the edges into the nodes at distance k. L levels
(the largest finite distance, at most the longest trajectory) of O(remaining edges) tensor ops. Edge
multiplicity cannot change an unweighted shortest path, so repeated transitions are counted once here by
construction. Self-loops (an invalid action, a move into a wall) are dropped: they never shorten a path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gigpo_lab.algorithm.grouping import pack

#: The distance of a node that cannot reach its goal (larger than any path in a batch of fewer rows).
UNREACHABLE = torch.iinfo(torch.int64).max // 4


class Transitions(NamedTuple):
    """Every row as one transition of its group's graph.

    node: (N,) int64 in 0..S-1, the row's state. next_node: (N,) int64 in 0..S+2K-1, where the step led.
    n_nodes: S + 2K, the states, then K goals, then K dead ends.
    """

    node: torch.Tensor
    next_node: torch.Tensor
    n_nodes: int


def transitions(
    node: torch.Tensor,
    n_states: int,
    group: torch.Tensor,
    n_groups: int,
    position: torch.Tensor,
    is_last: torch.Tensor,
    success: torch.Tensor,
    stay: torch.Tensor,
) -> Transitions:
    """The transition of every row (see the module docstring).

    node: (N,) int64 state ids in 0..S-1 (``n_states`` = S); group: (N,) int64 dense in 0..K-1;
    position: (N,) int64, each row's rank in (traj, step) order (``TrajectoryLayout.position``);
    is_last: (N,) bool, the row is its trajectory's last; success: (N,) bool, a last row that reached the
    goal; stay: (N,) bool, a failed last row that leads to its own node instead of the dead end.
    """
    n = node.numel()
    at = torch.empty_like(position).scatter_(
        0, position, torch.arange(n, device=node.device)
    )  # position -> row
    following = at.index_select(0, (position + 1).clamp(max=n - 1))  # the next row in (traj, step) order
    next_node = node.index_select(0, following)
    end = torch.where(success, n_states + group, n_states + n_groups + group)  # goal or dead end
    end = torch.where(stay, node, end)
    return Transitions(node, torch.where(is_last, end, next_node), n_states + 2 * n_groups)


def distinct_edges(graph: Transitions) -> tuple[torch.Tensor, torch.Tensor]:
    """(source (E,), target (E,)) int64: the distinct transitions of ``graph``, self-loops removed."""
    pair, n_pairs = pack(graph.node, graph.n_nodes, graph.next_node)
    source = torch.empty(n_pairs, dtype=torch.int64, device=pair.device).scatter_(0, pair, graph.node)
    target = torch.empty(n_pairs, dtype=torch.int64, device=pair.device).scatter_(0, pair, graph.next_node)
    keep = source != target
    return source[keep], target[keep]


def goal_distances(
    source: torch.Tensor, target: torch.Tensor, goals: torch.Tensor, n_nodes: int
) -> tuple[torch.Tensor, int]:
    """Unit-length shortest distances to the goals, by a level-synchronous reverse breadth-first search.

    source, target: (E,) int64 edges source -> target in 0..n_nodes-1; goals: (G,) int64 the goal nodes.
    Returns (d (n_nodes,) int64, ``UNREACHABLE`` where no path leads to a goal; the number of levels).
    """
    d = torch.full((n_nodes,), UNREACHABLE, dtype=torch.int64, device=source.device)
    d[goals] = 0
    frontier = torch.zeros(n_nodes, dtype=torch.bool, device=source.device)
    frontier[goals] = True
    level = 0
    while True:
        unvisited = d.index_select(0, source) == UNREACHABLE  # a visited source has its distance: drop it
        source, target = source[unvisited], target[unvisited]
        found = source[frontier.index_select(0, target)]  # the sources of the edges into the frontier
        if not found.numel():
            return d, level
        level += 1
        d[found] = level
        frontier.zero_()
        frontier[found] = True
