"""The estimator protocol: the ``Estimator`` base class, ``AdvantageOutput`` and parameter checks.

An estimator is built once from its parameters (``GiGPO(step_advantage_weight=1.0, ...)``) and then called
on each ``StepBatch``. ``__call__`` validates the columns (see ``prepare.py``), computes in float64, casts
back to the rewards' dtype and adds the summary metrics every estimator logs (``adv/mean``, ``adv/std``).
"""

from __future__ import annotations

import abc
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.prepare import Rows, prepare_rows
from gigpo_lab.batch import StepBatch
from gigpo_lab.choices import choice_enum

#: Normalisation modes of ALGORITHMS.md: ``x - mean`` or ``(x - mean) / (std + eps)`` (unbiased std).
MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")
#: What enters grpo's statistics: every step row (verl-agent's "cross steps") or one R(tau) per trajectory.
NORMALIZE_OVER: tuple[str, ...] = ("rows", "trajectories")
#: A group whose statistics have a single entry: ``raw`` uses mean 0, std 1 (verl-agent); ``zero`` gives 0.
SINGLETON_POLICIES: tuple[str, ...] = ("raw", "zero")
#: The Enum types of these choices, for the schemas (a bad value fails when the config is composed).
Mode = choice_enum("Mode", MODES, __name__)
NormalizeOver = choice_enum("NormalizeOver", NORMALIZE_OVER, __name__)
Singleton = choice_enum("Singleton", SINGLETON_POLICIES, __name__)
#: The columns every estimator needs.
BASE_COLUMNS: tuple[str, ...] = ("rewards", "group_ids", "traj_ids")


@dataclass(frozen=True)
class AdvantageOutput:
    """What an estimator returns.

    advantages: (N,) float, one value per step row, in the dtype of ``batch.rewards``.
    metrics: diagnostics for logging, ``adv/...`` keys, plain floats.
    returns: (N,) float, the critic's regression targets (ppo: GAE advantage + V, before any whitening), in
        the dtype of ``batch.rewards``; None for the critic-free estimators.
    """

    advantages: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    returns: torch.Tensor | None = None


class Estimator(abc.ABC):
    """Base class of every advantage estimator.

    Subclasses take their parameters as keyword arguments with defaults (Hydra instantiates them from
    ``conf/estimator/<name>.yaml``), validate them in ``__init__`` and implement ``compute``.
    ``name`` is set by ``register_estimator``.
    """

    name: ClassVar[str] = ""
    #: Columns the estimator reads when present (missing ``invalid`` means no invalid rows).
    optional: ClassVar[tuple[str, ...]] = ("invalid",)
    #: Where the loss puts the KL to the reference when ``loss.kl_in_reward`` is null: false = a loss term,
    #: true = subtracted from the step reward (ALGORITHMS.md, "The loss"). A subclass overrides it.
    kl_in_reward: ClassVar[bool] = False

    def __init__(self, **params: object) -> None:
        self.params: dict[str, object] = dict(params)

    @property
    def requires(self) -> tuple[str, ...]:
        """The columns this estimator, with these parameters, cannot run without."""
        return BASE_COLUMNS

    @abc.abstractmethod
    def compute(self, rows: Rows) -> tuple[torch.Tensor, dict[str, float]]:
        """Advantages (N,) float64 for validated rows, and estimator-specific metrics."""

    def value_targets(self, rows: Rows) -> torch.Tensor | None:
        """The critic's regression targets (N,) float64 for these rows; None (the default): no critic."""
        return None

    def __call__(self, batch: StepBatch) -> AdvantageOutput:
        import torch

        rows = prepare_rows(self.name, self.requires, self.optional, batch.columns())
        adv64, metrics = self.compute(rows)
        targets = self.value_targets(rows)
        adv = adv64.to(rows.dtype)
        if not bool(torch.isfinite(adv).all()):
            bad = int((~torch.isfinite(adv)).nonzero()[0, 0])
            raise FloatingPointError(
                f"estimator {self.name!r} produced a non-finite advantage at row {bad} "
                f"({adv[bad].item()} in {rows.dtype}); the rewards are too large for this dtype"
            )
        returns = None if targets is None else targets.to(rows.dtype)
        return AdvantageOutput(adv, {**summary_metrics("adv/", adv64), **metrics}, returns)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def check_bootstrap_truncated(name: str, bootstrap_truncated: object, gamma: float) -> bool:
    """``bootstrap_truncated`` as a bool, refused at gamma = 1 (the tail m / (1 - gamma) of a cut episode would be
    infinite)."""
    flag = check_bool(name, "bootstrap_truncated", bootstrap_truncated)
    if flag and gamma == 1.0:
        raise ValueError(
            f"{name}: bootstrap_truncated needs gamma < 1 (the tail m / (1 - gamma) of a cut episode is "
            "infinite at gamma = 1); set estimator.gamma below 1 or estimator.bootstrap_truncated=false"
        )
    return flag


def summary_metrics(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """``{prefix}mean`` and ``{prefix}std`` (unbiased; 0 for fewer than two values) of ``values`` (M,)."""
    if values.numel() < 2:
        return {f"{prefix}mean": float(values.sum()), f"{prefix}std": 0.0}
    return {f"{prefix}mean": float(values.mean()), f"{prefix}std": float(values.std())}


# --- parameter checks: every error names the estimator, the parameter and what is allowed ------------------


def check_choice(estimator: str, param: str, value: object, allowed: Sequence[str]) -> str:
    """``value`` (a str or a str-valued Enum, as Hydra passes schema enums) if it is one of ``allowed``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value not in allowed:
        raise ValueError(f"{estimator}: {param}={value!r} is not valid; expected one of {list(allowed)}")
    return str(value)


def check_real(
    estimator: str,
    param: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a float if it is finite and in the interval; the error states the interval."""
    left = "(-inf" if low is None else f"{'(' if low_open else '['}{low}"
    right = "inf)" if high is None else f"{high}{')' if high_open else ']'}"
    interval = f"{left}, {right}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{estimator}: {param} must be a real number in {interval}, got {value!r}")
    x = float(value)
    ok = math.isfinite(x)
    if ok and low is not None:
        ok = x > low if low_open else x >= low
    if ok and high is not None:
        ok = x < high if high_open else x <= high
    if not ok:
        raise ValueError(f"{estimator}: {param}={value!r} is outside {interval}")
    return x


def check_bool(estimator: str, param: str, value: object) -> bool:
    """``value`` if it is a bool (a typo such as ``"false"`` would otherwise be truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{estimator}: {param} must be true or false, got {value!r}")
    return value
