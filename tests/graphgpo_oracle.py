"""A loop oracle of GraphGPO, written from the six points of issue #50 and docs/ALGORITHMS.md ("GraphGPO"), with
dicts, sets and a queue; it shares no code with ``gigpo_lab.algorithm`` (the episode level and the similarity
clusters are the GiGPO oracle's, ``advantage_oracle.py``, itself independent of the package).

1. The graph: per group, an edge state -> next state for every step; a successful last step leads to the
   group's goal node.
2. Distances: breadth-first search backwards from the goal (unit edges).
3. Step returns: goal_return * gamma ** d(next state), or gamma ** (d(next) - d(state) + 1) with
   ``normalize_distance``; unreachable_return where d(next) is infinite; minus the row's penalty.
4. Step advantages: normalised within same-state groups, as GiGPO's.
5. A = episode_advantage_weight * A^E + step_advantage_weight * A^S.
6. Similarity: similar text anchors are one state (GiGPO's greedy clusters).

The lab's choices (ALGORITHMS.md): success is read from the last row (not cut; a reward > 0 under
``terminated_positive``); a failed last step leads to the group's dead end, or (``cut_end="stay"``, time-limit
cuts only) to its own state; ``count_transitions="edges"`` puts each distinct (state, next state) once into the
statistics, with its unpenalised return.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

from advantage_oracle import _norm, grpo, similarity_clusters


def states(rows, anchor_similarity_threshold=None):
    """{(traj, step): state}, a state being ("s", group, anchor) or ("s", group, cluster)."""
    if anchor_similarity_threshold is None:
        return {(r.traj, r.step): ("s", r.group, r.anchor) for r in rows}
    cluster = similarity_clusters(rows, anchor_similarity_threshold)
    return {(r.traj, r.step): ("s", r.group, cluster[(r.group, r.text)]) for r in rows}


def next_states(rows, state, success_on="terminated_positive", cut_end="dead_end"):
    """{(traj, step): the state the step led to}: the next row's, the goal, the dead end, or its own."""
    length = defaultdict(int)
    for r in rows:
        length[r.traj] += 1
    out = {}
    for r in rows:
        here = (r.traj, r.step)
        if r.step < length[r.traj] - 1:
            out[here] = state[(r.traj, r.step + 1)]
        elif not r.truncated and (success_on == "terminated" or r.reward > 0):
            out[here] = ("goal", r.group)
        elif r.truncated and cut_end == "stay":
            out[here] = state[here]
        else:
            out[here] = ("dead end", r.group)
    return out


def reverse_bfs(into, goals):
    """{node: d}, d the fewest edges from the node to any of ``goals``, by a queue; ``into`` maps a node to the
    nodes with an edge into it. Nodes that reach no goal are absent (d = inf)."""
    d, queue = dict.fromkeys(goals, 0), deque(goals)
    while queue:
        node = queue.popleft()
        for previous in into[node]:
            if previous not in d:
                d[previous] = d[node] + 1
                queue.append(previous)
    return d


def distances(rows, state, after):
    """{node: d} for every node that reaches its group's goal (the others are absent: d = inf)."""
    into = defaultdict(set)  # node -> the nodes with an edge into it
    for r in rows:
        into[after[(r.traj, r.step)]].add(state[(r.traj, r.step)])
    return reverse_bfs(into, [("goal", group) for group in {r.group for r in rows}])


def step_returns(
    rows,
    gamma=0.10,
    normalize_distance=False,
    goal_return=10.0,
    unreachable_return=0.0,
    success_on="terminated_positive",
    cut_end="dead_end",
    anchor_similarity_threshold=None,
):
    """(states, next states, {(traj, step): the return before the penalty}), points 1-3."""
    state = states(rows, anchor_similarity_threshold)
    after = next_states(rows, state, success_on, cut_end)
    d = distances(rows, state, after)
    plain = {}
    for here in state:
        if after[here] not in d:
            plain[here] = unreachable_return
        else:
            power = d[after[here]] - d[state[here]] + 1 if normalize_distance else d[after[here]]
            plain[here] = goal_return * gamma**power
    return state, after, plain


def graphgpo(
    rows,
    step_advantage_weight=1.0,
    episode_advantage_weight=1.0,
    gamma=0.10,
    normalize_distance=False,
    goal_return=10.0,
    unreachable_return=0.0,
    success_on="terminated_positive",
    cut_end="dead_end",
    count_transitions="rows",
    mode="mean_std_norm",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    step_singleton="zero",
    anchor_similarity_threshold=None,
    **episode_params,
):
    episode = grpo(
        rows, mode=mode, invalid_action_penalty=invalid_action_penalty, epsilon=epsilon, **episode_params
    )
    state, after, plain = step_returns(
        rows, gamma, normalize_distance, goal_return, unreachable_return, success_on, cut_end,
        anchor_similarity_threshold,
    )  # fmt: skip
    entries = defaultdict(list)
    if count_transitions == "rows":
        for r in rows:
            here = (r.traj, r.step)
            entries[state[here]].append(plain[here] - invalid_action_penalty * r.invalid)
    else:
        edges = {(state[(r.traj, r.step)], after[(r.traj, r.step)]): (r.traj, r.step) for r in rows}
        for (node, _), here in edges.items():
            entries[node].append(plain[here])
    out = []
    for r, e in zip(rows, episode, strict=True):
        here = (r.traj, r.step)
        g = plain[here] - invalid_action_penalty * r.invalid
        step = _norm(g, entries[state[here]], mode, epsilon, step_singleton)
        out.append(episode_advantage_weight * e + step_advantage_weight * step)
    return out


def goal_distance(rows, **params):
    """{(traj, step): d of the row's state} (math.inf where it cannot reach the goal)."""
    state = states(rows, params.get("anchor_similarity_threshold"))
    after = next_states(
        rows, state, params.get("success_on", "terminated_positive"), params.get("cut_end", "dead_end")
    )
    d = distances(rows, state, after)
    return {here: d.get(s, math.inf) for here, s in state.items()}
