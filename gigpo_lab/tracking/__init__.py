"""Experiment tracking: MLflow runs with batched logging (see ``mlflow_tracker``)."""

from gigpo_lab.tracking.mlflow_tracker import MlflowTracker, default_tracking_uri, flatten_config

__all__ = ["MlflowTracker", "default_tracking_uri", "flatten_config"]
