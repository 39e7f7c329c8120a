"""Column checks and the validated, float64 view of a batch that every estimator computes on.

All input errors surface here, before any number is computed, with a sentence that names the estimator,
the column and the remedy: missing columns (and what fills them, from ``COLUMN_PROVIDERS``), mismatched
lengths, non-finite rewards (first bad row), wrong dtypes, a trajectory spread over two groups, and step
ids that are not 0..T-1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.grouping import dense_ids
from gigpo_lab.algorithm.returns import TrajectoryLayout, trajectory_layout
from gigpo_lab.batch import COLUMN_PROVIDERS

_ID_COLUMNS = ("group_ids", "traj_ids", "step_ids", "anchor_ids")
_TENSOR_COLUMNS = ("rewards", *_ID_COLUMNS, "invalid", "truncated", "values")


class MissingColumnError(ValueError):
    """An estimator needs a column that the batch (or the rollout set-up) does not provide."""


@dataclass
class Rows:
    """Validated step rows. N rows, K groups, J trajectories; every tensor is on the rewards' device.

    dtype: the rewards' dtype (the output dtype).
    rewards: (N,) float64. invalid: (N,) float64, 1.0 on invalid rows (all 0 when the column is absent).
    group: (N,) int64 dense group in 0..K-1 (sorted by group_id). traj: (N,) int64 dense in 0..J-1.
    traj_group: (J,) int64, the dense group of each trajectory.
    group_ids, traj_ids: (N,) the original ids, for messages.
    step: (N,) int64 or None; layout: the (traj, step) layout, set when step_ids is required.
    anchor: (N,) int64 or None. anchor_texts: N str or None.
    truncated: (N,) bool or None, set when an estimator uses the column and the batch has it.
    values: (N,) float64 or None, the critic's V(s_t), set when an estimator requires it (ppo).
    """

    dtype: torch.dtype
    rewards: torch.Tensor
    invalid: torch.Tensor
    group: torch.Tensor
    n_groups: int
    traj: torch.Tensor
    n_traj: int
    traj_group: torch.Tensor
    group_ids: torch.Tensor
    traj_ids: torch.Tensor
    step: torch.Tensor | None = None
    layout: TrajectoryLayout | None = None
    anchor: torch.Tensor | None = None
    anchor_texts: list[str] | None = None
    truncated: torch.Tensor | None = None
    values: torch.Tensor | None = None

    @property
    def n(self) -> int:
        return int(self.rewards.numel())


def check_columns(estimator: str, requires: Iterable[str], available: Iterable[str]) -> None:
    """Raise ``MissingColumnError`` unless every required column is available.

    The message names the estimator, each missing column and what provides it.
    """
    have = set(available)
    missing = [c for c in requires if c not in have]
    if missing:
        what = "; ".join(f"{c!r} ({COLUMN_PROVIDERS.get(c, 'no known provider')})" for c in missing)
        raise MissingColumnError(
            f"estimator {estimator!r} needs column(s) {missing} that the batch does not provide: {what}. "
            f"Available columns: {sorted(have)}"
        )


def prepare_rows(
    estimator: str, requires: tuple[str, ...], optional: tuple[str, ...], columns: dict[str, object]
) -> Rows:
    """Validate ``columns`` (``StepBatch.columns()``) for ``estimator`` and build its ``Rows``."""
    import torch

    check_columns(estimator, requires, [k for k, v in columns.items() if v is not None])
    used = set(requires) | set(optional)
    present = {k: v for k, v in columns.items() if v is not None}
    _check_shapes(estimator, present)

    rewards = present["rewards"]
    if not rewards.is_floating_point():
        raise TypeError(
            f"{estimator}: rewards must be a float tensor (float32 or float64), got {rewards.dtype}"
        )
    bad = ~torch.isfinite(rewards)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{estimator}: rewards must be finite; row {i} has reward {rewards[i].item()}")
    for name in _ID_COLUMNS:
        ids = present.get(name)
        if name in used and ids is not None and (ids.is_floating_point() or ids.dtype == torch.bool):
            raise TypeError(f"{estimator}: {name} must be an integer tensor, got {ids.dtype}")
    device = rewards.device

    invalid = torch.zeros(rewards.shape, dtype=torch.float64, device=device)
    if "invalid" in used and "invalid" in present:
        invalid = _flags(estimator, "invalid", present["invalid"].to(device)).to(torch.float64)

    group_ids = present["group_ids"].to(device=device, dtype=torch.int64)
    traj_ids = present["traj_ids"].to(device=device, dtype=torch.int64)
    group, n_groups = dense_ids(group_ids)
    traj, n_traj = dense_ids(traj_ids)
    traj_group = _traj_group(estimator, group, traj, n_traj, group_ids, traj_ids)

    rows = Rows(
        dtype=rewards.dtype,
        rewards=rewards.to(torch.float64),
        invalid=invalid,
        group=group,
        n_groups=n_groups,
        traj=traj,
        n_traj=n_traj,
        traj_group=traj_group,
        group_ids=group_ids,
        traj_ids=traj_ids,
    )
    if "step_ids" in used and "step_ids" in present:
        rows.step = present["step_ids"].to(device=device, dtype=torch.int64)
        if "step_ids" in requires:
            rows.layout = trajectory_layout(traj, rows.step, n_traj, traj_ids)
    if "anchor_ids" in used and "anchor_ids" in present:
        rows.anchor = present["anchor_ids"].to(device=device, dtype=torch.int64)
    if "anchor_texts" in used and "anchor_texts" in present:
        texts = list(present["anchor_texts"])
        wrong = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if wrong is not None:
            raise TypeError(
                f"{estimator}: anchor_texts must be str; row {wrong} is {type(texts[wrong]).__name__}"
            )
        rows.anchor_texts = texts
    if "truncated" in used and "truncated" in present:
        rows.truncated = _flags(estimator, "truncated", present["truncated"].to(device)).to(torch.bool)
    if "values" in used and "values" in present:
        rows.values = _finite_floats(estimator, "values", present["values"].to(device))
    return rows


def _finite_floats(estimator: str, name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` (N,) as float64 if it is a finite float tensor; otherwise an error naming the column and row."""
    import torch

    if not x.is_floating_point():
        raise TypeError(f"{estimator}: {name} must be a float tensor, got {x.dtype}")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{estimator}: {name} must be finite; row {i} has {x[i].item()}")
    return x.to(torch.float64)


def _flags(estimator: str, name: str, flags: torch.Tensor) -> torch.Tensor:
    """``flags`` (N,) unchanged if it is bool or 0/1; otherwise a ValueError naming the column."""
    import torch

    if flags.dtype != torch.bool and not bool(((flags == 0) | (flags == 1)).all()):
        raise ValueError(f"{estimator}: {name} must be bool or 0/1, got values {flags.unique().tolist()}")
    return flags


def _check_shapes(estimator: str, present: dict[str, object]) -> None:
    """Every tensor column is 1-D, and every column has the length of ``rewards`` (N > 0)."""
    import torch

    lengths: dict[str, int] = {}
    for name, value in present.items():
        if name in _TENSOR_COLUMNS:
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"{estimator}: {name} must be a torch.Tensor of shape (N,), got {type(value).__name__}"
                )
            if value.dim() != 1:
                raise ValueError(
                    f"{estimator}: {name} must be 1-D of shape (N,), got shape {tuple(value.shape)}"
                )
            lengths[name] = int(value.shape[0])
        elif name == "anchor_texts":
            if isinstance(value, str):
                raise TypeError(f"{estimator}: anchor_texts must be a list of N str, got a single str")
            lengths[name] = len(value)
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} has {v}" for k, v in lengths.items())
        raise ValueError(f"{estimator}: all columns must have the same length N; {shown} rows")
    if lengths["rewards"] == 0:
        raise ValueError(f"{estimator}: the batch is empty (N = 0); an estimator needs at least one row")


def _traj_group(
    estimator: str,
    group: torch.Tensor,
    traj: torch.Tensor,
    n_traj: int,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
) -> torch.Tensor:
    """(J,) dense group of each trajectory; raises if a trajectory's rows carry two group ids."""
    import torch

    # Any row's group per trajectory (scatter_ keeps an arbitrary one), then every row must agree with it.
    traj_group = torch.empty(n_traj, dtype=torch.int64, device=group.device).scatter_(0, traj, group)
    split = traj_group.index_select(0, traj) != group
    if bool(split.any()):
        j = int(traj[split.nonzero()[0, 0]])
        rows = (traj == j).nonzero().squeeze(1)
        seen = sorted(set(group_ids[rows].tolist()))
        raise ValueError(
            f"{estimator}: traj_ids must be unique across the batch, but traj_id={int(traj_ids[rows[0]])} "
            f"appears in groups {seen}; each trajectory belongs to exactly one group"
        )
    return traj_group
