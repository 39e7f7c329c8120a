"""The estimator protocol: the ``Estimator`` base class, ``AdvantageOutput`` and the shared parameter rules.

An estimator is built once from its parameters (``GiGPO(step_advantage_weight=1.0, ...)``), which its schema
declares (``gigpo_lab.algorithm.settings``), and then called on each ``StepBatch``. ``__call__`` validates
the columns (see ``prepare.py``), computes in float64, casts back to the rewards' dtype and adds the summary
metrics every estimator logs (``adv/mean``, ``adv/std``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from gigpo_lab.algorithm.prepare import Rows, prepare_rows
from gigpo_lab.algorithm.settings import Configured
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
#: The invalid-action penalty p of every estimator that has one, the paper's 0.1 (each schema's default).
INVALID_ACTION_PENALTY = 0.1
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


class Estimator(Configured, abc.ABC):
    """Base class of every advantage estimator.

    A subclass names its ``schema``, the dataclass that declares its parameters once (the option
    ``estimator=<name>``; ``gigpo_lab.algorithm.settings``): ``__init__(**params)`` checks them and sets one
    attribute each, and ``check`` adds any rule across them. It implements ``compute``. ``name`` is set by
    ``register_estimator``.
    """

    name: ClassVar[str] = ""
    #: Columns the estimator reads when present (missing ``invalid`` means no invalid rows).
    optional: ClassVar[tuple[str, ...]] = ("invalid",)
    #: Where the loss puts the KL to the reference when ``loss.kl_in_reward`` is null: false = a loss term,
    #: true = subtracted from the step reward (ALGORITHMS.md, "The loss"). A subclass overrides it.
    kl_in_reward: ClassVar[bool] = False

    @property
    def owner(self) -> str:  # type: ignore[override]
        """Who refuses a parameter, in its messages: the estimator's name."""
        return self.name

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


def check_bootstrap_truncated(estimator: Estimator) -> None:
    """``bootstrap_truncated`` is refused at gamma = 1 (the tail m / (1 - gamma) of a cut episode would be
    infinite): the rule across two parameters of gigpo and hgpo."""
    if estimator.bootstrap_truncated and estimator.gamma == 1.0:  # type: ignore[attr-defined]
        raise ValueError(
            f"{estimator.name}: bootstrap_truncated needs gamma < 1 (the tail m / (1 - gamma) of a cut episode "
            "is infinite at gamma = 1); set estimator.gamma below 1 or estimator.bootstrap_truncated=false"
        )


def summary_metrics(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """``{prefix}mean`` and ``{prefix}std`` (unbiased; 0 for fewer than two values) of ``values`` (M,)."""
    if values.numel() < 2:
        return {f"{prefix}mean": float(values.sum()), f"{prefix}std": 0.0}
    return {f"{prefix}mean": float(values.mean()), f"{prefix}std": float(values.std())}
