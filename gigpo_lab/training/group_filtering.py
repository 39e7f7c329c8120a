"""An iteration's collections under a group filter (``group_filter``; the rules: ``gigpo_lab/algorithm/group_filter.py``).

``collect_filtered`` runs the collect-more loop: collection c (from 0) plays B groups with the group seeds
``seeds_of(c)``; the rule marks which of its groups pass; the loop stops once B groups passed (a rule that
``fills_batch``) or after ``rule.max_collections`` collections. The batch is then:

- a rule that fills its batch (``nonconstant``): the first B passing groups in collection order, and, when the
  cap was spent with fewer, the earliest failing groups to make B;
- otherwise (``top_std``): the passing groups of the one collection.

It is renumbered as one collection of its groups (``take_groups``): group ids 0..K-1 in collection order,
trajectory ids ``group * G + member``, anchor ids interned anew; rows sorted by (trajectory, step).

What is counted: the rollout metrics (``rollout/env_steps``, ``success_rate``, ``return``, ...) cover every
collected episode, dropped or kept, so the env-step budget (``trainer.max_env_steps``) pays for every step the
filter cost and the success rate is the policy's, not the filter's; ``rollout/groups_dropped`` counts the groups
that failed the rule over all collections, ``rollout/groups_refilled`` those of them taken back into the batch,
``rollout/extra_collections`` the collections after the first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from gigpo_lab.batch import StepBatch
from gigpo_lab.rollout.collector import intern_strings
from gigpo_lab.training.distributed import SUMMED, WEIGHTED_BY

#: The per-trajectory tensors of a collection's ``extras`` (``Collector.collect``).
TRAJ_EXTRAS = ("success", "returns", "lengths", "env_failed")


def collect_filtered(
    collector, seeds_of: Callable[[int], list[int]], rule, generator: torch.Generator, pad_id: int
) -> tuple[StepBatch, dict[str, float]]:
    """The iteration's batch and rollout metrics under ``rule`` (module docstring).

    Args:
        collector: ``collect(seeds, generator) -> (StepBatch, metrics)``; ``groups`` (B), ``group_size`` (G).
        seeds_of: the B group seeds of collection c.
        rule: ``keep(returns, traj_group, B) -> (B,) bool``, ``max_collections``, ``fills_batch``.
        generator: the iteration's sampling stream, drawn from by each collection in turn.
        pad_id: the tokenizer's pad id (collections' prompts and responses are padded to one width).
    """
    groups = collector.groups
    parts: list[StepBatch] = []
    metrics: list[dict[str, float]] = []
    passing: list[tuple[int, int]] = []
    failing: list[tuple[int, int]] = []
    for c in range(rule.max_collections):
        batch, rollout = collector.collect(seeds_of(c), generator)
        parts.append(batch)
        metrics.append(rollout)
        keep = rule.keep(batch.extras["returns"].double(), batch.extras["traj_group"], groups)
        passing += [(c, g) for g in keep.nonzero().squeeze(1).tolist()]
        failing += [(c, g) for g in (~keep).nonzero().squeeze(1).tolist()]
        if not rule.fills_batch or len(passing) >= groups:
            break
    picks = passing[:groups]
    refilled = failing[: groups - len(picks)] if rule.fills_batch else []
    out = merge_rollout_metrics(metrics)
    out["rollout/groups_dropped"] = float(len(failing))
    out["rollout/groups_refilled"] = float(len(refilled))
    out["rollout/extra_collections"] = float(len(parts) - 1)
    return take_groups(parts, sorted(picks + refilled), collector.group_size, pad_id), out


def merge_rollout_metrics(metrics: Sequence[dict[str, float]]) -> dict[str, float]:
    """One iteration's rollout metrics from its collections': counts (``SUMMED``) summed, means (``WEIGHTED_BY``)
    weighted by their counts, any other key the mean over the collections."""
    if len(metrics) == 1:
        return dict(metrics[0])
    out = {}
    for key in metrics[0]:
        values = [m[key] for m in metrics]
        if key in SUMMED:
            out[key] = float(sum(values))
        elif key in WEIGHTED_BY:
            weights = [m[WEIGHTED_BY[key]] for m in metrics]
            total = sum(weights)
            out[key] = (
                sum(v * w for v, w in zip(values, weights, strict=True) if w > 0) / total if total else 0.0
            )
        else:
            out[key] = sum(values) / len(values)
    return out


def take_groups(
    parts: Sequence[StepBatch], picks: Sequence[tuple[int, int]], group_size: int, pad_id: int
) -> StepBatch:
    """The groups ``picks`` (sorted (collection, group) pairs; pick k becomes group k) of the collections
    ``parts``, as one collection of K groups of ``group_size`` (module docstring). Token columns are padded to
    the widest collection (prompts on the left, responses on the right); ``extras["samples"]`` is the first
    collection's."""
    if list(picks) != sorted(picks):
        raise ValueError("take_groups: picks must be sorted by (collection, group)")
    g = group_size
    chunks: list[StepBatch] = []
    new_traj: list[torch.Tensor] = []
    extras: dict[str, list[torch.Tensor]] = {name: [] for name in TRAJ_EXTRAS}
    for p, part in enumerate(parts):
        mine = [(k, grp) for k, (q, grp) in enumerate(picks) if q == p]
        if not mine:
            continue
        new_group = torch.full((len(part.extras["traj_group"]) // g,), -1, dtype=torch.long)
        old = torch.tensor([grp for _, grp in mine])
        new_group[old] = torch.tensor([k for k, _ in mine])
        chunk = part.select(new_group[part.group_ids] >= 0)
        chunks.append(chunk)
        new_traj.append(new_group[chunk.group_ids] * g + chunk.traj_ids % g)
        old_traj = (old.unsqueeze(1) * g + torch.arange(g)).reshape(-1)  # their trajectories, in pick order
        for name in TRAJ_EXTRAS:
            extras[name].append(part.extras[name][old_traj])
    traj = torch.cat(new_traj)
    step = torch.cat([c.step_ids for c in chunks])
    order = torch.argsort(traj * (int(step.max()) + 1) + step)
    merged: dict = {name: torch.cat(v) for name, v in extras.items()}
    merged["traj_group"] = torch.arange(len(picks) * g) // g
    merged["samples"] = parts[0].extras.get("samples", [])

    def cat(name: str, left: bool = False, value=0) -> torch.Tensor:
        values = [getattr(c, name) for c in chunks]
        if values[0].dim() == 1:
            return torch.cat(values)[order]
        width = max(v.shape[1] for v in values)
        padded = [
            F.pad(v, (width - v.shape[1], 0) if left else (0, width - v.shape[1]), value=value)
            for v in values
        ]
        return torch.cat(padded)[order]

    def texts(name: str) -> list[str]:
        flat = [t for c in chunks for t in getattr(c, name)]
        return [flat[i] for i in order.tolist()]

    anchors = texts("anchor_texts")
    return StepBatch(
        rewards=cat("rewards"),
        group_ids=traj[order] // g,
        traj_ids=traj[order],
        step_ids=step[order],
        anchor_ids=intern_strings(anchors),
        invalid=cat("invalid"),
        truncated=cat("truncated"),
        anchor_texts=anchors,
        next_anchor_texts=texts("next_anchor_texts"),
        prompt_ids=cat("prompt_ids", True, pad_id),
        prompt_mask=cat("prompt_mask", True, False),
        response_ids=cat("response_ids", False, pad_id),
        response_mask=cat("response_mask", False, False),
        old_logprobs=cat("old_logprobs", False, 0.0),
        allowed_tokens=None if chunks[0].allowed_tokens is None else cat("allowed_tokens"),
        extras=merged,
    )
