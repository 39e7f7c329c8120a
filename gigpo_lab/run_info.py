"""Run-level helpers for ``train``: config checks, run names, tags, output folder and resume info.

Kept apart from ``train.py`` so they are testable without building a run, and cheap to import.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from gigpo_lab.tracking.sweep import sweep_context

#: Columns every collector provides whatever the env; the rest depend on what the env reports.
_BASE_COLUMNS = ("rewards", "group_ids", "traj_ids", "step_ids", "invalid")


def validate_config(cfg: DictConfig) -> None:
    """Reject values that would give a wrong or empty run, each with a one-sentence fix, before anything runs."""
    checks = [
        (cfg.trainer.iterations >= 1, f"trainer.iterations={cfg.trainer.iterations} must be >= 1"),
        (cfg.trainer.ppo_epochs >= 1, f"trainer.ppo_epochs={cfg.trainer.ppo_epochs} must be >= 1"),
        (cfg.rollout.groups >= 1, f"rollout.groups={cfg.rollout.groups} must be >= 1"),
        (cfg.rollout.group_size >= 1, f"rollout.group_size={cfg.rollout.group_size} must be >= 1"),
        (cfg.env.max_turns >= 1, f"env.max_turns={cfg.env.max_turns} must be >= 1"),
    ]
    omega = cfg.estimator.get("step_advantage_weight")
    if omega is not None:
        checks.append(
            (
                not math.isnan(omega) and omega >= 0,
                f"estimator.step_advantage_weight={omega} must be a number >= 0",
            )
        )
    gamma = cfg.estimator.get("gamma")
    if gamma is not None:
        checks.append((0.0 <= gamma <= 1.0, f"estimator.gamma={gamma} must lie in [0, 1]"))
    # every estimator here normalises within a group: a group of one has no baseline
    checks.append(
        (
            cfg.rollout.group_size >= 2,
            f"rollout.group_size={cfg.rollout.group_size}: group baselines need >= 2 trajectories per group; "
            "set rollout.group_size=2 or more",
        )
    )
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def env_columns(env_fn: Callable, env_cfg: DictConfig) -> set[str]:
    """The batch columns the configured env lets the collector fill (anchors only if it reports them)."""
    env = env_fn()
    try:
        _, info = env.reset(seed=0)
    finally:
        env.close()
    columns = set(_BASE_COLUMNS)
    if "anchor" in info:
        columns |= {"anchor_ids", "anchor_texts"}
    return columns


def run_name(cfg: DictConfig) -> str:
    """``<estimator>[-w<ω>]-<env>-s<seed>`` unless ``tracking.run_name`` is set."""
    if cfg.tracking.run_name:
        return str(cfg.tracking.run_name)
    parts = [estimator_name(cfg)]
    omega = cfg.estimator.get("step_advantage_weight")
    if omega is not None:
        parts.append(f"w{float(omega)}")
    parts += [str(cfg.env.name), f"s{cfg.seed}"]
    return "-".join(parts)


def estimator_name(cfg: DictConfig) -> str:
    """The registry name of the configured estimator class (e.g. ``reinforce_pp``), without building it."""
    from hydra.utils import get_class

    return str(get_class(cfg.estimator._target_).name)


def _hydra_choices() -> dict[str, str]:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}


def run_tags(cfg: DictConfig) -> dict[str, str]:
    """Tags: estimator, env, model, seed, ω where it applies, git commit, and the Hydra sweep id in multirun."""
    from hydra.core.hydra_config import HydraConfig

    choices = _hydra_choices()
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
    if HydraConfig.initialized() and str(HydraConfig.get().mode) == "RunMode.MULTIRUN":
        tags["sweep_job"] = str(HydraConfig.get().job.num)
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


def output_dir(cfg: DictConfig) -> Path:
    """``output_dir`` if set, else Hydra's run directory, else ``outputs/<run name>-<time>``; created and checked."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.output_dir:
        out = Path(cfg.output_dir)
    elif HydraConfig.initialized():
        out = Path(HydraConfig.get().runtime.output_dir)
    else:
        out = Path("outputs") / f"{run_name(cfg)}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise OSError(
            f"the output directory {out} is not writable ({err.strerror}); set output_dir=<a writable folder>"
        ) from err
    return out


def checkpoint_run_id(ckpt_path: str | None) -> str | None:
    """The MLflow run id stored in a checkpoint, so a resumed run continues the same MLflow run."""
    if not ckpt_path:
        return None
    import torch

    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <output_dir>/checkpoints/last.ckpt"
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state.get("gigpo_lab", {}).get("mlflow_run_id")
