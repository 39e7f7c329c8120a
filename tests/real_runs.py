"""Helpers for tests that compare real training runs: a config with its own output dir and store, the
metric history read back from MLflow, "trained alike" checks."""

from __future__ import annotations

from pathlib import Path

import torch
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config


def run_cfg(tiny_overrides, tmp_path, name: str, *extra: str):
    """The tiny test config with output dir ``tmp_path/name`` and store ``tmp_path/name.db``, plus ``extra``."""
    base = [o for o in tiny_overrides if not o.startswith(("output_dir", "tracking.uri"))]
    out = [f"output_dir={tmp_path / name}", f"tracking.uri=sqlite:///{tmp_path / name}.db"]
    return compose_config([*base, *out, *extra])


def history(uri: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of metric ``key`` of the one run in the store ``uri``."""
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]


def assert_same_metrics(got: dict[str, float], want: dict[str, float]) -> None:
    """Two runs' final metrics are equal, key by key, except timings (``time/``, ``perf/``)."""
    for key in want:
        if not key.startswith(("time/", "perf/")):
            assert got[key] == want[key], key


def policy_state(ckpt) -> dict[str, torch.Tensor]:
    """The Lightning module's state dict in checkpoint ``ckpt``."""
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


#: Wall-clock metrics: they measure the machine, not the run.
CLOCK_PREFIXES = ("time/", "perf/")


def metric_histories(uri: str) -> dict[str, list[tuple[int, float]]]:
    """Every non-clock metric of the store's single run: key -> [(step, value), ...] in step order."""
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
        if not key.startswith(CLOCK_PREFIXES)
    }


def checkpoint_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The weights and the optimizer's state tensors of a checkpoint, flattened by name."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    out = {f"weights/{k}": v for k, v in ckpt["state_dict"].items()}
    for i, state in ckpt["optimizer_states"][0]["state"].items():
        out.update({f"adam/{i}/{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
    return out
