"""A run's display name (``gigpo-w0.6-s1-frozenlake``) and the estimator's registry name, from the config
alone (nothing built)."""

from __future__ import annotations

from omegaconf import DictConfig


def run_name(cfg: DictConfig) -> str:
    """``<estimator>[-w<ω>]-s<seed>-<env>`` (e.g. ``gigpo-w0.6-s1-frozenlake``) unless ``tracking.run_name``
    is set: short, and what differs between the runs of a sweep first, so the UI's narrow name column shows
    it; the env (the same across a sweep) last."""
    if cfg.tracking.run_name:
        return str(cfg.tracking.run_name)
    parts = [estimator_name(cfg)]
    omega = cfg.estimator.get("step_advantage_weight")
    if omega is not None:
        parts.append(f"w{float(omega):g}")
    parts += [f"s{cfg.seed}", str(cfg.env.name)]
    return "-".join(parts)


def estimator_name(cfg: DictConfig) -> str:
    """The registry name of the configured estimator class (e.g. ``reinforce_pp``), without building it."""
    from hydra.utils import get_class

    return str(get_class(cfg.estimator._target_).name)
