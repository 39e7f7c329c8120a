"""Shared fixtures: small composed configs, each run in its own tmp_path with its own sqlite MLflow store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tiny_sizes import TINY  # noqa: E402 - re-exported for the tests


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """An empty sqlite MLflow store made once per session (MLflow's schema migrations take 3-8 s a store)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("empty_store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments(max_results=1)
    return path


@pytest.fixture
def tiny_overrides(tmp_path, empty_mlflow_store):
    """TINY plus a private output dir and sqlite store under tmp_path (a copy of the session's empty store)."""
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    return [*TINY, f"output_dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"]
