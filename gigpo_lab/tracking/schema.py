"""Typed schema of the ``tracking`` config group: the option ``tracking=mlflow`` itself (no YAML file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class MlflowConfig:
    """Where runs go and what they carry."""

    #: Tracking URI; null = sqlite:///<working dir>/mlflow.db; http://host:port for a server.
    uri: Optional[str] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: MLflow experiment name; every run of one sweep shares it.
    experiment: str = "gigpo-lab"
    #: null = <estimator>[-w<step_advantage_weight>]-s<seed>-<env>, e.g. gigpo-w1-s0-frozenlake.
    run_name: Optional[str] = None  # noqa: UP045
    #: Upload the final checkpoint as an artifact of the run.
    log_checkpoint: bool = True


#: ``"tracking/<option>"`` -> schema (stored as ``schema/tracking/<option>``).
SCHEMAS: dict[str, type] = {"tracking/mlflow": MlflowConfig}
