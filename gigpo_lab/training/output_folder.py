"""``output_dir``: the run's output folder (checkpoints, logs), chosen, created and checked writable."""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig

from gigpo_lab.training.run_names import run_name


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
