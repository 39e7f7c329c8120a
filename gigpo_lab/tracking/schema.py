"""Typed schema of the ``tracking`` config group: the option ``tracking=mlflow`` itself (no YAML file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional  # noqa: UP035 (OmegaConf reads typing.Dict)


@dataclass
class MlflowConfig:
    """Where runs go and what they carry."""

    #: Tracking URI; null = sqlite:///<working dir>/mlflow.db; http://host:port for a server.
    uri: Optional[str] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: MLflow experiment name; every run of one sweep shares it.
    experiment: str = "gigpo-lab"
    #: null = <estimator>[-w<step_advantage_weight>]-s<seed>-<env>, e.g. gigpo-w1-s0-frozenlake.
    run_name: Optional[str] = None  # noqa: UP045
    #: Upload the final checkpoint as an artifact of the run. Not part of a sweep job's identity (resume).
    log_checkpoint: bool = True
    #: Extra tags of the run (``gigpo-lab study run`` names its study, setting and arm here); not part of a
    #: sweep job's identity.
    tags: Dict[str, str] = field(default_factory=dict)  # noqa: UP006
    #: When the run finishes, write its metrics row to this JSON file (``gigpo-lab study run``'s per-run rows,
    #: gigpo_lab/study/rows.py); null = none. Not part of a sweep job's identity.
    row_file: Optional[str] = None  # noqa: UP045


#: ``"tracking/<option>"`` -> schema (stored as ``schema/tracking/<option>``).
SCHEMAS: dict[str, type] = {"tracking/mlflow": MlflowConfig}
