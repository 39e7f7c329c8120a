"""Segment ids and group statistics: the one place where advantages are normalised within groups.

Everything here is vectorised: a "segment" is a dense id 0..K-1 per row, and statistics are segment sums
(``index_add_``), never a Python loop over rows or groups. Every estimator normalises through
``group_normalize`` so that singleton groups are treated the same way everywhere (STYLE.md anti-patterns).

The normalisation modes (ALGORITHMS.md; verl-agent ``gigpo/core_gigpo.py``, ``episode_norm_reward`` and
``step_norm_reward``)::

    mean_norm:      x - mean(group)
    mean_std_norm: (x - mean(group)) / (std(group) + eps)        std unbiased (N-1), eps = 1e-6

Singleton groups (one entry in the statistics): ``raw`` substitutes mean 0 and std 1 (verl-agent), so the
value is x (mean_norm) or x / (1 + eps) (mean_std_norm); ``zero`` gives 0 (ROLL, Trinity-RFT).

Determinism: on the CPU, segment sums run in row order, so results repeat bit for bit. On CUDA,
``index_add_`` accumulates with atomics and the last bit can change between runs unless
``torch.use_deterministic_algorithms(True)`` is set (then, as checked on an H200, runs repeat and grpo
equals gigpo at omega = 0 bit for bit; about 2x slower, still a few ms for 1e6 rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch


def dense_ids(*keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense ids for the distinct tuples of ``keys``.

    keys: each (N,) integer. Returns (ids (N,) int64 in 0..K-1, K); ids follow the lexicographic order of
    the key tuples, so equal tuples share an id and the ids do not depend on the row order.
    Cost: O(N) per key when its values span a range of at most ~2N (the collector's ids do), else one
    sort (``torch.unique``); never a Python loop over rows.
    """
    if not keys:
        raise ValueError("dense_ids needs at least one key")
    ids, k = rank(keys[0])
    for key in keys[1:]:
        ids, k = pack(ids, k, key)
    return ids, k


def pack(ids: torch.Tensor, k: int, key: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense ids of the pairs (``ids``, ``key``), lexicographic; ``ids`` (N,) are dense in 0..k-1.

    When k times the key's span is small, the pair packs directly into one int64 and is ranked once;
    otherwise the key is ranked first (both ranks are < N, so the packed value is < N^2).
    """
    import torch

    key = key.to(torch.int64)
    lo, hi = int(key.min()), int(key.max())
    span = hi - lo + 1
    if k * span <= 2 * key.numel() + 1024:
        return rank(ids * span + (key - lo))
    key_ids, key_k = rank(key)
    return rank(ids * key_k + key_ids)


def rank(key: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(rank of each value among the distinct values of ``key`` (N,) int, number of distinct values).

    Same result as ``torch.unique(key, return_inverse=True)``; when the values span at most 2N + 1024
    integers it marks them in a table and takes a cumulative sum instead of sorting.
    """
    import torch

    key = key.to(torch.int64)
    lo, hi = int(key.min()), int(key.max())
    span = hi - lo + 1
    if span <= 2 * key.numel() + 1024:
        shifted = key - lo
        ranks = torch.cumsum(torch.bincount(shifted, minlength=span) > 0, 0) - 1
        return ranks.index_select(0, shifted), int(ranks[-1]) + 1
    uniq, inv = torch.unique(key, return_inverse=True)
    return inv, int(uniq.numel())


def segment_sum(values: torch.Tensor, segment: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Per-segment sums. values: (N,) float; segment: (N,) int64 in 0..K-1. Returns (K,)."""
    import torch

    out = torch.zeros(num_segments, dtype=values.dtype, device=values.device)
    return out.index_add_(0, segment, values)


def segment_count(segment: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Rows per segment. segment: (N,) int64 in 0..K-1. Returns (K,) int64."""
    import torch

    return torch.bincount(segment, minlength=num_segments)


class GroupStats(NamedTuple):
    """Per-group statistics, each (K,): ``count`` int64, ``mean`` and unbiased ``std`` float.

    ``std`` is 0 where ``count < 2`` (undefined there; ``group_normalize`` applies the singleton policy),
    and None when it was not asked for.
    """

    count: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor | None


def segment_min(values: torch.Tensor, segment: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Per-segment minimum. values: (N,); segment: (N,) int64 in 0..K-1. Returns (K,); +inf if empty."""
    import torch

    out = torch.full((num_segments,), float("inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, segment, values, "amin")


def group_stats(
    values: torch.Tensor, segment: torch.Tensor, num_segments: int, with_std: bool = True
) -> GroupStats:
    """Count, mean and (if ``with_std``) unbiased std of ``values`` (N,) per segment (N,) in 0..K-1.

    Corrected two-pass mean: m0 = sum(x) / n, then mean = m0 + sum(x - m0) / n, then the sum of squared
    deviations. A plain sum / n can miss a constant group's value c by an ulp, which / eps would turn into
    noise; the correction puts the mean back on c exactly (c - m0 is exact by Sterbenz's lemma, and the
    correction's own error, about n^2 2^-106 |c|, is far below half an ulp of c for groups under 2^26
    rows). So a constant group has mean = c, std = 0 and advantages exactly 0.
    """
    import torch

    count = segment_count(segment, num_segments)
    n = count.to(values.dtype).clamp(min=1)
    mean = segment_sum(values, segment, num_segments) / n
    mean = mean + segment_sum(values - mean.index_select(0, segment), segment, num_segments) / n
    if not with_std:
        return GroupStats(count, mean, None)
    dev = values - mean.index_select(0, segment)
    var = segment_sum(dev * dev, segment, num_segments) / (count - 1).clamp(min=1).to(values.dtype)
    std = torch.where(count > 1, var.sqrt(), torch.zeros_like(var))
    return GroupStats(count, mean, std)


def group_normalize(
    values: torch.Tensor,
    segment: torch.Tensor,
    num_segments: int,
    *,
    mode: str,
    eps: float,
    singleton: str,
    stat_values: torch.Tensor | None = None,
    stat_segment: torch.Tensor | None = None,
    stats: GroupStats | None = None,
) -> torch.Tensor:
    """Normalise ``values`` within their groups (see the module docstring for the formulas).

    values: (N,) float; segment: (N,) int64 in 0..K-1, the group of each value.
    stat_values, stat_segment: (M,) each, optional. When given, the group statistics come from these
        entries instead of ``values`` (grpo's ``normalize_over: trajectories`` feeds one R(tau) per
        trajectory while each row still normalises its own score). A group is a singleton when one
        entry enters its statistics.
    stats: ``group_stats(values, segment, num_segments)`` when the caller already has it.
    mode: ``mean_norm`` or ``mean_std_norm``. singleton: ``raw`` or ``zero``.
    Returns (N,) in the dtype of ``values``.
    """
    import torch

    own = stat_values is None  # statistics of the values themselves
    if stats is None:
        if own:
            stat_values, stat_segment = values, segment
        elif stat_segment is None:
            raise ValueError("stat_values needs stat_segment")
        stats = group_stats(stat_values, stat_segment, num_segments, with_std=mode == "mean_std_norm")
    count, mean, std = stats
    single = count == 1
    if singleton == "raw":  # verl-agent: id2mean = 0, id2std = 1 for a group of one
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = None if std is None else torch.where(single, torch.ones_like(std), std)
    elif singleton != "zero":
        raise ValueError(f"singleton={singleton!r} is not valid; expected one of ['raw', 'zero']")
    out = values - mean.index_select(0, segment)
    if mode == "mean_std_norm":
        out = out / (std + eps).index_select(0, segment)
    elif mode != "mean_norm":
        raise ValueError(f"mode={mode!r} is not valid; expected one of ['mean_norm', 'mean_std_norm']")
    if singleton == "zero" and not own:
        # With its own statistics a group of one is already exactly 0: its mean is its value (x / 1,
        # corrected by (x - x) / 1) and its std is 0. Only borrowed statistics need the mask.
        out = torch.where(single.index_select(0, segment), torch.zeros_like(out), out)
    return out
