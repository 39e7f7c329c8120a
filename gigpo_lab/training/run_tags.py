"""A run's MLflow tags: what it ran (estimator, env, model, seed, ω), the lab's git commit, and where it
sits in a sweep (the sweep id, the job number, the experiment or sweep config)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from omegaconf import DictConfig

from gigpo_lab.config_paths import hydra_choices, in_multirun
from gigpo_lab.tracking.sweep_env import sweep_context
from gigpo_lab.tracking.sweep_resume import job_key_tag
from gigpo_lab.training.run_names import estimator_name


def run_tags(cfg: DictConfig) -> dict[str, str]:
    """Tags: estimator, env, model, seed, ω where it applies, git commit, and in a multirun the sweep id,
    the job's number and its identity (``sweep_job_key``: its overrides, for ``resume=true``)."""
    from hydra.core.hydra_config import HydraConfig

    choices = hydra_choices()
    tags = {
        "estimator": estimator_name(cfg),
        "env": str(cfg.env.name),
        "model": choices.get("model", str(cfg.model.get("name", cfg.model._target_))),
        "seed": str(cfg.seed),
        "git_commit": git_commit(),
    }
    omega = cfg.estimator.get("step_advantage_weight")
    if omega is not None:
        tags["step_advantage_weight"] = f"{float(omega)}"
    _, sweep_id = sweep_context()
    if sweep_id:
        tags["sweep_id"] = sweep_id
    if in_multirun():
        tags["sweep_job"] = str(HydraConfig.get().job.num)
        tags.update(job_key_tag())
    tags.update({str(k): str(v) for k, v in (cfg.tracking.get("tags") or {}).items()})
    for group in ("experiments", "sweeps"):
        if choices.get(group):
            tags[group] = choices[group]
    return tags


def git_commit() -> str:
    """The lab's git commit, or ``unknown`` outside a checkout."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=Path(__file__).parent,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
