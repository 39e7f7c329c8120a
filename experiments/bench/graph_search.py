"""GraphGPO's goal-distance search, vectorised and as a per-group loop (issue #50: is the loop worth vectorising?).

``bench_advantages.py`` times both on the transition graph of its batches (columns ``bfs vec``, ``bfs loop``):
``transition_graph.goal_distances`` searches every group at once, level by level, on the distinct edges;
``loop_distances`` keeps the reversed edges in a dict and runs one Python queue per group from its goal.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque

import torch

from gigpo_lab.algorithm import build_estimator
from gigpo_lab.algorithm.prepare import prepare_rows
from gigpo_lab.algorithm.transition_graph import UNREACHABLE, distinct_edges, goal_distances


def best_ms(fn, repeats: int) -> float:
    """The best of ``repeats`` timed runs of ``fn``, in ms (the CPU: nothing to synchronise)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def graph_edges(cols: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(source (E,), target (E,), goals (K,), nodes) of graphgpo's transition graph of the batch (defaults)."""
    estimator = build_estimator("graphgpo")
    rows = prepare_rows("graphgpo", estimator.requires, estimator.optional, cols)
    graph, n_states = estimator.graph(rows)
    source, target = distinct_edges(graph)
    return source, target, torch.arange(n_states, n_states + rows.n_groups), graph.n_nodes


def loop_distances(
    source: torch.Tensor, target: torch.Tensor, goals: torch.Tensor, n_nodes: int
) -> torch.Tensor:
    """The per-group loop: reversed edges in a dict, then one queue per group from its goal. (n_nodes,) int64."""
    into = defaultdict(list)
    for a, b in zip(source.tolist(), target.tolist(), strict=True):
        into[b].append(a)
    d = [UNREACHABLE] * n_nodes
    for goal in goals.tolist():  # one breadth-first search per group
        d[goal] = 0
        queue = deque([goal])
        while queue:
            node = queue.popleft()
            for previous in into[node]:
                if d[previous] == UNREACHABLE:
                    d[previous] = d[node] + 1
                    queue.append(previous)
    return torch.tensor(d, dtype=torch.int64)


def time_search(cpu_cols: dict[str, torch.Tensor], repeats: int) -> tuple[float, float]:
    """(ms of goal_distances, ms of loop_distances) on the batch's graph, after checking that they agree."""
    source, target, goals, n_nodes = graph_edges(cpu_cols)
    vec = goal_distances(source, target, goals, n_nodes)[0]
    if not torch.equal(vec, loop_distances(source, target, goals, n_nodes)):
        raise AssertionError("goal_distances and the per-group loop disagree")
    vec_ms = best_ms(lambda: goal_distances(source, target, goals, n_nodes), repeats)
    loop_ms = best_ms(lambda: loop_distances(source, target, goals, n_nodes), min(repeats, 3))
    return vec_ms, loop_ms
