"""Step groups from text anchors by similarity (GiGPO's optional similarity mode).

ALGORITHMS.md, "Similarity mode"; verl-agent ``gigpo/core_gigpo.py`` (``build_step_group`` with
``enable_similarity``). Inside each episode group, anchors are clustered greedily: an anchor joins the
first cluster whose first member ``rep`` has ``difflib.SequenceMatcher(None, anchor, rep).ratio() >=
threshold``, otherwise it starts a new cluster.

Order (a choice the contract leaves open, fixed here so the result does not depend on the row order):
anchors are visited in order of first appearance when the group's rows are sorted by (traj_id, step_id),
i.e. trajectory by trajectory as verl-agent lays out its batch. Equal texts always land in the same
cluster (ratio 1 >= threshold, and the clusters before it rejected the text already), so the loop runs
over the distinct (group, text) pairs only, never over rows; the pairwise ratio is pruned exactly with
difflib's upper bounds ``real_quick_ratio`` and ``quick_ratio``.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import dense_ids


def similar(anchor: str, matcher: SequenceMatcher, threshold: float) -> bool:
    """``SequenceMatcher(None, anchor, rep).ratio() >= threshold``, with ``matcher``'s seq2 = rep."""
    matcher.set_seq1(anchor)
    return (
        matcher.real_quick_ratio() >= threshold
        and matcher.quick_ratio() >= threshold
        and matcher.ratio() >= threshold
    )


def similarity_step_groups(
    texts: list[str], group: torch.Tensor, position: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, int]:
    """Cluster ids of the rows' anchor texts, greedily within each group.

    texts: N str. group: (N,) int64 dense episode group. position: (N,) int64, each row's rank in
    (traj, step) order (``TrajectoryLayout.position``). threshold: in (0, 1).
    Returns (ids (N,) int64 in 0..C-1, C); ids never mix two episode groups.
    """
    import torch

    device = group.device
    n = group.numel()
    vocabulary = {t: i for i, t in enumerate(dict.fromkeys(texts))}
    words = list(vocabulary)
    text_id = torch.tensor(list(map(vocabulary.__getitem__, texts)), dtype=torch.int64, device=device)
    pair, n_pairs = dense_ids(group, text_id)  # one id per distinct (group, text)
    big = torch.iinfo(torch.int64).max
    first = torch.full((n_pairs,), big, dtype=torch.int64, device=device).scatter_reduce_(
        0, pair, position, "amin"
    )
    pair_group = torch.empty(n_pairs, dtype=torch.int64, device=device).scatter_(0, pair, group)
    pair_text = torch.empty(n_pairs, dtype=torch.int64, device=device).scatter_(0, pair, text_id)
    order = torch.argsort(pair_group * n + first)

    cluster_of_pair = [0] * n_pairs
    reps: list[SequenceMatcher] = []  # the clusters of the current group, by first member
    n_clusters, current = 0, None
    for p, g, t in zip(
        order.tolist(), pair_group[order].tolist(), pair_text[order].tolist(), strict=True
    ):  # loop over distinct (group, text) pairs
        if g != current:
            current, reps, base = g, [], n_clusters
        anchor = words[t]
        k = next((k for k, m in enumerate(reps) if similar(anchor, m, threshold)), None)
        if k is None:
            reps.append(SequenceMatcher(None, "", anchor))
            k = len(reps) - 1
            n_clusters += 1
        cluster_of_pair[p] = base + k
    ids = torch.tensor(cluster_of_pair, dtype=torch.int64, device=device)[pair]
    return ids, n_clusters
