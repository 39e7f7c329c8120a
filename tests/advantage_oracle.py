"""A slow, obviously-correct loop oracle of the advantage estimators, and Hypothesis batches to feed it.

The oracle is written from ALGORITHMS.md with plain floats, dicts and per-trajectory loops, in the style
of verl-agent's reference code (``gigpo/core_gigpo.py``: ``id2score`` dicts, a backwards loop per
trajectory for the discounted return). It shares no code with ``gigpo_lab.algorithm``: a bug there
cannot hide behind the same bug here.

Conventions fixed by the contract and mirrored here (not derived from the vectorised code):
- a group is a singleton when one entry enters its statistics (one row under normalize_over=rows);
  ``raw`` means mean 0, std 1, ``zero`` means the advantage is 0;
- the std is unbiased; mean_std_norm divides by (std + eps);
- similarity clusters are built row by row in (traj_id, step_id) order; identical texts always match.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from difflib import SequenceMatcher

import torch
from hypothesis import strategies as st


@dataclass(frozen=True)
class Row:
    group: int
    traj: int
    step: int
    reward: float
    anchor: int
    invalid: bool
    text: str = ""
    truncated: bool = False  # the time limit cut the episode at this row (its last)


# --- the oracle -------------------------------------------------------------------------------------------


def _mean(xs):
    return statistics.mean(xs)  # exact (rational arithmetic), then rounded once


def _std(xs):
    return statistics.stdev(xs)  # unbiased (N - 1); exactly 0 for equal values


def _norm(x, entries, mode, eps, singleton):
    """Normalise one value against the entries of its group (verl-agent's id2mean / id2std)."""
    if len(entries) == 1:
        if singleton == "zero":
            return 0.0
        mean, std = 0.0, 1.0
    else:
        mean, std = _mean(entries), _std(entries)
    if mode == "mean_norm":
        return x - mean
    return (x - mean) / (std + eps)


def _returns(rows):
    total = defaultdict(float)
    for r in rows:
        total[r.traj] += r.reward
    return total


def grpo(
    rows,
    mode="mean_norm",
    normalize_over="rows",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    episode_singleton="raw",
    **_,
):
    R = _returns(rows)
    scores = [R[r.traj] - invalid_action_penalty * r.invalid for r in rows]
    id2score = defaultdict(list)
    seen = set()
    for r, s in zip(rows, scores, strict=True):
        if normalize_over == "rows":
            id2score[r.group].append(s)
        elif r.traj not in seen:
            seen.add(r.traj)
            id2score[r.group].append(R[r.traj])
    return [
        _norm(s, id2score[r.group], mode, epsilon, episode_singleton)
        for r, s in zip(rows, scores, strict=True)
    ]


def discounted_returns(rows, gamma, bootstrap_truncated=False):
    """{(traj, step): G_t} with G_t = r_t + gamma * G_{t+1}, a backwards loop per trajectory.

    With ``bootstrap_truncated`` a trajectory whose last row is cut starts the loop from the value of
    its mean reward earned forever, mean / (1 - gamma), instead of 0."""
    by_traj = defaultdict(list)
    for r in rows:
        by_traj[r.traj].append(r)
    out = {}
    for traj, steps in by_traj.items():
        steps = sorted(steps, key=lambda r: r.step)
        g = 0.0
        if bootstrap_truncated and steps[-1].truncated:
            g = _mean([r.reward for r in steps]) / (1.0 - gamma)
        for r in reversed(steps):
            g = r.reward + gamma * g
            out[(traj, r.step)] = g
    return out


def turn_gae(rows, values, gamma, lam):
    """{(traj, step): (A_t, R_t)} of GAE(gamma, lam) with one value per turn (Schulman et al. 2016, eq. 16),
    written as the sum it is: A_t = sum_l (gamma * lam)^l * delta_{t+l}, delta_t = r_t + gamma V_{t+1} - V_t,
    V = 0 after a trajectory's last turn; R_t = A_t + V_t. ``values``: {(traj, step): V}."""
    by_traj = defaultdict(list)
    for r in rows:
        by_traj[r.traj].append(r)
    out = {}
    for traj, steps in by_traj.items():
        steps = sorted(steps, key=lambda r: r.step)
        v = [values[(traj, r.step)] for r in steps] + [0.0]
        delta = [r.reward + gamma * v[i + 1] - v[i] for i, r in enumerate(steps)]
        for t, r in enumerate(steps):
            adv = sum((gamma * lam) ** k * delta[t + k] for k in range(len(steps) - t))
            out[(traj, r.step)] = (adv, adv + v[t])
    return out


def critic(r):
    """A made-up critic's V of row ``r`` (the ``values`` column of ``columns``), in [-1, 1] by quarters."""
    return ((r.anchor * 7 + r.step * 3) % 9 - 4) / 4


def ppo(rows, gamma=1.0, lam=1.0, whiten_advantages=True, invalid_action_penalty=0.1, **_):
    """PPO's advantages (ALGORITHMS.md, "ppo"; verl ``compute_gae_advantage_return``): GAE over ``critic``'s
    values with the penalty in each invalid turn's reward, then (A - mean) / sqrt(var + 1e-8) over the batch
    (unbiased var; one row: A - mean)."""
    penalised = [replace(r, reward=r.reward - invalid_action_penalty * r.invalid) for r in rows]
    gae = turn_gae(penalised, {(r.traj, r.step): critic(r) for r in rows}, gamma, lam)
    adv = [gae[(r.traj, r.step)][0] for r in rows]
    if not whiten_advantages:
        return adv
    mean = _mean(adv)
    if len(adv) < 2:
        return [a - mean for a in adv]
    var = _std(adv) ** 2
    return [(a - mean) / math.sqrt(var + 1e-8) for a in adv]


def similarity_clusters(rows, threshold):
    """{(group, text): cluster} by greedy first-member clustering, rows visited in (traj, step) order."""
    clusters = defaultdict(list)  # group -> list of (rep text, cluster id)
    out = {}
    next_id = 0
    for r in sorted(rows, key=lambda r: (r.traj, r.step)):
        chosen = None
        for rep, cid in clusters[r.group]:
            if r.text == rep or SequenceMatcher(None, r.text, rep).ratio() >= threshold:
                chosen = cid
                break
        if chosen is None:
            chosen = next_id
            next_id += 1
            clusters[r.group].append((r.text, chosen))
        if (r.group, r.text) in out:
            assert out[(r.group, r.text)] == chosen, "greedy clustering split identical texts"
        out[(r.group, r.text)] = chosen
    return out


def gigpo(
    rows,
    step_advantage_weight=1.0,
    gamma=0.95,
    mode="mean_norm",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    step_singleton="zero",
    anchor_similarity_threshold=None,
    bootstrap_truncated=False,
    **episode_params,
):
    episode = grpo(
        rows, mode=mode, invalid_action_penalty=invalid_action_penalty, epsilon=epsilon, **episode_params
    )
    G = discounted_returns(rows, gamma, bootstrap_truncated)
    step_return = [G[(r.traj, r.step)] - invalid_action_penalty * r.invalid for r in rows]
    if anchor_similarity_threshold is None:
        keys = [(r.group, r.anchor) for r in rows]
    else:
        cluster = similarity_clusters(rows, anchor_similarity_threshold)
        keys = [(r.group, cluster[(r.group, r.text)]) for r in rows]
    id2score = defaultdict(list)
    for k, g in zip(keys, step_return, strict=True):
        id2score[k].append(g)
    step = [
        _norm(g, id2score[k], mode, epsilon, step_singleton) for k, g in zip(keys, step_return, strict=True)
    ]
    return [e + step_advantage_weight * s for e, s in zip(episode, step, strict=True)]


def hgpo(
    rows,
    history_length=2,
    length_weight_alpha=1.0,
    episode_level="none",
    step_advantage_weight=1.0,
    population_std=True,
    gamma=0.95,
    mode="mean_std_norm",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    bootstrap_truncated=False,
    **episode_params,
):
    """HGPO from its recipe (verl-agent ``recipe/hgpo/core_hgpo.py``, ``hgpo_advantage_estimate``), in its
    shape: per trajectory, the anchors in step order; for each row and k = 0..min(K, t), the cluster key
    (group, k, the k + 1 anchors ending at the row); a cluster of >= 2 rows gives each member the item
    (k, norm(G)) with the population std (``r.std(unbiased=False)``) or, with ``population_std=False``, the
    unbiased one; items equal to 0 are dropped; the rest are averaged with weights (k + 2) ** alpha (the
    recipe's L ** alpha, L = anchors in the key + 1), the episode item (``episode_level="weighted"``, the
    recipe's base_group) weighing 1 ** alpha. The recipe divides by sum(w) + eps; this oracle by sum(w), as
    the lab does (ALGORITHMS.md). ``episode_level="add"`` is GiGPO's A^E + omega * A^H."""
    episode = grpo(
        rows, mode=mode, invalid_action_penalty=invalid_action_penalty, epsilon=epsilon, **episode_params
    )
    items = defaultdict(list)
    for k, members, scores in _hgpo_clusters(
        rows, history_length, gamma, invalid_action_penalty, bootstrap_truncated
    ):
        mean = _mean(scores)
        std = statistics.pstdev(scores) if population_std else _std(scores)
        for m, x in zip(members, scores, strict=True):
            items[m].append((k, x - mean if mode == "mean_norm" else (x - mean) / (std + epsilon)))
    out = []
    for r, e in zip(rows, episode, strict=True):
        mine = [((k + 2.0) ** length_weight_alpha, a) for k, a in items[(r.traj, r.step)]]
        if episode_level == "weighted":
            mine.append((1.0, e))
        mine = [(w, a) for w, a in mine if a != 0]
        step = sum(w * a for w, a in mine) / sum(w for w, _ in mine) if mine else 0.0
        out.append(e + step_advantage_weight * step if episode_level == "add" else step)
    return out


def _hgpo_clusters(rows, history_length, gamma, invalid_action_penalty, bootstrap_truncated):
    """HGPO's clusters of >= 2 rows: (k, [(traj, step)], [G - penalty]) per key (group, k, the k + 1 anchors
    ending at the row)."""
    G = discounted_returns(rows, gamma, bootstrap_truncated)
    value = {(r.traj, r.step): G[(r.traj, r.step)] - invalid_action_penalty * r.invalid for r in rows}
    anchors = defaultdict(dict)
    for r in rows:
        anchors[r.traj][r.step] = r.anchor
    clusters = defaultdict(list)
    for r in rows:
        for k in range(min(history_length, r.step) + 1):
            seq = tuple(anchors[r.traj][t] for t in range(r.step - k, r.step + 1))
            clusters[(r.group, k, seq)].append((r.traj, r.step))
    return [(k, m, [value[x] for x in m]) for (_, k, _), m in clusters.items() if len(m) >= 2]


def hgpo_on_rounding_edge(
    rows,
    history_length=2,
    episode_level="none",
    gamma=0.95,
    mode="mean_std_norm",
    invalid_action_penalty=0.1,
    epsilon=1e-6,
    bootstrap_truncated=False,
    tol=1e-9,
    **params,
):
    """True when an item HGPO averages lies within ``tol`` of 0 while its group's items differ: a step item
    G - mean(G) of a cluster whose values are not all equal, or (``episode_level="weighted"``) an episode
    item of a group whose episode advantages are not all equal. The recipe drops items that are exactly 0, so
    there the result turns on the last bit of a float sum: this oracle's exact mean and a float mean (the
    recipe's, the lab's) can round to different sides."""
    clusters = _hgpo_clusters(rows, history_length, gamma, invalid_action_penalty, bootstrap_truncated)
    step_edge = any(
        len(set(scores)) > 1 and any(abs(x - _mean(scores)) <= tol for x in scores)
        for _, _, scores in clusters
    )
    if episode_level != "weighted":
        return step_edge
    params = {k: v for k, v in params.items() if k in ("normalize_over", "episode_singleton")}
    episode = grpo(rows, mode=mode, invalid_action_penalty=invalid_action_penalty, epsilon=epsilon, **params)
    by_group = defaultdict(list)
    for r, e in zip(rows, episode, strict=True):
        by_group[r.group].append(e)
    return step_edge or any(len(set(es)) > 1 and any(abs(e) <= tol for e in es) for es in by_group.values())


def rloo(rows, invalid_action_penalty=0.1, **_):
    R = _returns(rows)
    trajs = defaultdict(set)
    for r in rows:
        trajs[r.group].add(r.traj)
    out = []
    for r in rows:
        others = [R[t] for t in trajs[r.group] if t != r.traj]
        baseline = sum(others) / len(others) if others else 0.0
        out.append(R[r.traj] - invalid_action_penalty * r.invalid - baseline)
    return out


def reinforce_pp(rows, invalid_action_penalty=0.1, epsilon=1e-6, **_):
    R = _returns(rows)
    trajs = defaultdict(set)
    for r in rows:
        trajs[r.group].add(r.traj)
    x = [R[r.traj] - invalid_action_penalty * r.invalid - _mean([R[t] for t in trajs[r.group]]) for r in rows]
    if len(x) == 1:
        return [0.0]
    mean, std = _mean(x), _std(x)
    return [(v - mean) / (std + epsilon) for v in x]


def gigpo_step_index(rows, step_advantage_weight=1.0, scale_by_std=False, epsilon=1e-6, **_):
    R = _returns(rows)
    trajs = defaultdict(set)
    same_step = defaultdict(list)
    for r in rows:
        trajs[r.group].add(r.traj)
        same_step[(r.group, r.step)].append(r.reward)
    step_adv = defaultdict(list)
    for r in rows:
        step_adv[r.traj].append(r.reward - _mean(same_step[(r.group, r.step)]))
    out = []
    for r in rows:
        group_returns = [R[t] for t in trajs[r.group]]
        value = R[r.traj] - _mean(group_returns) + step_advantage_weight * _mean(step_adv[r.traj])
        if scale_by_std:
            value /= (_std(group_returns) if len(group_returns) > 1 else 1.0) + epsilon
        out.append(value)
    return out


def intrinsic_stream(rows, gamma=0.95, epsilon=1e-6):
    """The exploration stream of ``exploration.own_advantage`` (gigpo_lab/algorithm/exploration.py), from its text: each
    row's reward stands for its bonus b; B_t = b_t + gamma * B_{t+1} backwards over the trajectory; then
    (B - mean) / (std + eps) over every row of the batch, unbiased std, a batch of one row giving 0. No group,
    anchor or invalid flag enters it."""
    G = discounted_returns(rows, gamma)
    to_go = [G[(r.traj, r.step)] for r in rows]
    if len(to_go) == 1:
        return [0.0]
    mean, std = _mean(to_go), _std(to_go)
    return [(b - mean) / (std + epsilon) for b in to_go]


ORACLES = {
    "grpo": grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "gigpo": gigpo,
    "gigpo_step_index": gigpo_step_index,
    "hgpo": hgpo,
    "ppo": ppo,
}


def columns(rows, dtype=torch.float64):
    """The keyword columns of ``compute_advantages`` for ``rows``."""
    return {
        "rewards": torch.tensor([r.reward for r in rows], dtype=dtype),
        "group_ids": torch.tensor([r.group for r in rows], dtype=torch.int64),
        "traj_ids": torch.tensor([r.traj for r in rows], dtype=torch.int64),
        "step_ids": torch.tensor([r.step for r in rows], dtype=torch.int64),
        "anchor_ids": torch.tensor([r.anchor for r in rows], dtype=torch.int64),
        "invalid": torch.tensor([r.invalid for r in rows], dtype=torch.bool),
        "truncated": torch.tensor([r.truncated for r in rows], dtype=torch.bool),
        "anchor_texts": [r.text for r in rows],
        "values": torch.tensor([critic(r) for r in rows], dtype=dtype),
    }


# --- Hypothesis batches -----------------------------------------------------------------------------------

#: Text anchors with near-duplicates (ratios on both sides of typical thresholds), an empty one, and a
#: 250-character one that difflib's autojunk heuristic handles specially.
TEXTS = (
    "you are at (1, 2) facing north",
    "you are at (1, 2) facing south",
    "you are at (1, 3) facing north",
    "the door is open",
    "the door is closed",
    "a key lies on the table",
    "",
    "wall " * 50,
    "wall " * 49 + "door ",
)

#: Small ids (the collector's dense ranges: a counting pass) or any int64 (a sort) take different code paths.
_ids = st.one_of(st.integers(min_value=-3, max_value=40), st.integers(min_value=-(2**62), max_value=2**62))
_reward = st.one_of(
    st.sampled_from([0.0, 1.0, 10.0, -1.0, 0.5]),
    st.floats(min_value=-10.0, max_value=10.0, allow_nan=False, allow_infinity=False),
)


@st.composite
def batches(draw, max_groups=4, max_trajs=4, max_steps=5, n_anchors=4, rewards=None):
    """A shuffled list of ``Row``: random groups (singletons included), repeated anchors, invalid rows,
    and trajectories whose last row is cut by the time limit or not.

    Group, trajectory and anchor ids are distinct int64 values, small or arbitrary. About half of the groups get one
    constant reward for all their rows, so constant groups are common. ``rewards``: the strategy of one reward
    (default: a few round values or any float in [-10, 10]).
    """
    rewards = _reward if rewards is None else rewards
    n_groups = draw(st.integers(1, max_groups))
    n_trajs = draw(st.lists(st.integers(1, max_trajs), min_size=n_groups, max_size=n_groups))
    group_ids = draw(st.lists(_ids, min_size=n_groups, max_size=n_groups, unique=True))
    traj_ids = iter(draw(st.lists(_ids, min_size=sum(n_trajs), max_size=sum(n_trajs), unique=True)))
    palette = draw(st.lists(_ids, min_size=n_anchors, max_size=n_anchors, unique=True))  # anchor ids
    rows = []
    for g, n in zip(group_ids, n_trajs, strict=True):
        constant = draw(st.one_of(st.none(), rewards))
        for _ in range(n):
            j = next(traj_ids)
            length, cut = draw(st.integers(1, max_steps)), draw(st.booleans())
            for t in range(length):
                rows.append(
                    Row(
                        group=g,
                        traj=j,
                        step=t,
                        reward=constant if constant is not None else draw(rewards),
                        anchor=draw(st.sampled_from(palette)),
                        invalid=draw(st.booleans()),
                        text=draw(st.sampled_from(TEXTS)),
                        truncated=cut and t == length - 1,
                    )
                )
    return draw(st.permutations(rows))
