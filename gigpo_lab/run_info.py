"""Run-level helpers for ``train``: config checks, run names, tags, output folder and resume info.

Kept apart from ``train.py`` so they are testable without building a run, and cheap to import.
"""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gigpo_lab.errors import ConfigError
from gigpo_lab.tracking.sweep import sweep_context

#: Columns every collector provides whatever the env; the rest depend on what the env reports.
_BASE_COLUMNS = ("rewards", "group_ids", "traj_ids", "step_ids", "invalid", "truncated")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def validate_config(cfg: DictConfig) -> None:
    """Reject values that would give a wrong or empty run, each with a one-sentence fix, before anything runs.

    Raises ``ConfigError`` (a ``ValueError``) naming the key, the value and what is allowed: a required key
    (``???``) left unset, a value out of range or of the wrong type, a model folder that does not exist (a
    strategy the lab cannot run is refused by ``LightningRuntime``, by its class).
    """
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        group = _hydra_choices().get(key.split(".", 1)[0])
        where = f" with {key.split('.', 1)[0]}={group}" if group else ""
        raise ConfigError(f"{key} is required{where} and has no default; add {key}=<value> to the command")
    checks = []
    for key, minimum in (
        ("trainer.iterations", 1),
        ("trainer.ppo_epochs", 1),
        ("trainer.checkpoint_every", 1),
        ("trainer.eval_every", 0),
        ("trainer.sample_every", 0),
        ("rollout.groups", 1),
        ("rollout.group_size", 1),
        ("rollout.eval_episodes", 1),
        ("env.max_turns", 1),
    ):
        value = OmegaConf.select(cfg, key)
        checks.append((_is_int(value) and value >= minimum, f"{key}={value!r} must be an int >= {minimum}"))
    seed = OmegaConf.select(cfg, "seed")
    checks.append((_is_int(seed), f"seed={seed!r} must be an int"))
    lr = OmegaConf.select(cfg, "trainer.optimizer.lr")
    if lr is not None:
        checks.append(
            (
                _is_number(lr) and 0 <= lr < math.inf,
                f"trainer.optimizer.lr={lr!r} must be a number >= 0 (0 = frozen)",
            )
        )
    clip = cfg.trainer.reward_clip  # a float or None (trainer schema)
    checks.append(
        (
            clip is None or 0 < clip < math.inf,
            f"trainer.reward_clip={clip!r} must be a number > 0 (the rewards are clipped to [-c, c]), or null for "
            "the env's rewards unclipped",
        )
    )
    rate = cfg.rollout.max_env_error_rate  # a float (rollout schema)
    checks.append((0 <= rate <= 1, f"rollout.max_env_error_rate={rate!r} must lie in [0, 1]"))
    omega = cfg.estimator.get("step_advantage_weight")
    if omega is not None:
        checks.append(
            (
                _is_number(omega) and 0 <= omega < math.inf,
                f"estimator.step_advantage_weight={omega} must be a number >= 0",
            )
        )
    gamma = cfg.estimator.get("gamma")
    if gamma is not None:
        checks.append(
            (_is_number(gamma) and 0.0 <= gamma <= 1.0, f"estimator.gamma={gamma} must lie in [0, 1]")
        )
        checks.append(
            (
                not (cfg.estimator.get("bootstrap_truncated") and gamma == 1.0),
                "estimator.gamma=1.0 with estimator.bootstrap_truncated=true: the tail mean / (1 - gamma) of an "
                "episode cut by the time limit is infinite at gamma = 1; add estimator.bootstrap_truncated=false "
                "(G_t stops at the cut, as in the paper) or set estimator.gamma below 1",
            )
        )
    from gigpo_lab.policy.schema import (
        TinyConfig,  # loaded by the compose already; torch stays out of imports
    )

    # null is the policy's choice (Policy.packed_update): the tiny policy packs, the HF ones do not
    tiny = cfg.model.get("_target_") == TinyConfig._target_
    shared = tiny if cfg.trainer.shared_prefix is None else cfg.trainer.shared_prefix
    checks.append(
        (
            not (shared and cfg.model.get("gradient_checkpointing", False)),
            "trainer.shared_prefix=true runs the update with tree attention, which activation checkpointing would "
            "recompute without the tree; set model.gradient_checkpointing=false or trainer.shared_prefix=false",
        )
    )
    tokens = cfg.trainer.shared_prefix_tokens  # an int or None (trainer schema)
    checks.append(
        (
            tokens is None or tokens == 0 or (tokens > 0 and shared),
            f"trainer.shared_prefix_tokens={tokens} bounds the packed chunks of trainer.shared_prefix=true; set "
            "trainer.shared_prefix=true (and a positive budget), or trainer.shared_prefix_tokens=null",
        )
    )
    # every estimator here normalises within a group: a group of one has no baseline
    group_size = cfg.rollout.group_size  # an int (rollout schema)
    checks.append(
        (
            group_size < 1 or group_size >= 2,
            f"rollout.group_size={group_size}: group baselines need >= 2 trajectories per group; "
            "set rollout.group_size=2 or more",
        )
    )
    checks.append(_model_folder_check(cfg.model))
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def _model_folder_check(model: DictConfig) -> tuple[bool, str]:
    """A ``model.path`` that names no file or folder is refused here (loading it would fail after seconds)."""
    path = model.get("path")
    if not isinstance(path, str) or Path(path).expanduser().exists():
        return True, ""
    return False, (
        f"model.path={path}: no such folder; point it at a Hugging Face model folder (config.json, weights "
        "and tokenizer files)"
    )


def check_policy(policy, model_cfg: DictConfig) -> None:
    """Refuse a policy whose tokenizer lacks the special tokens rollouts need (eos ends a response)."""
    tokenizer = policy.tokenizer
    where = f"model.path={model_cfg.path}" if "path" in model_cfg else f"model {model_cfg._target_}"
    if getattr(tokenizer, "eos_id", None) is None:
        raise ValueError(
            f"the tokenizer of {where} has no eos token, so no response could ever end; set eos_token in its "
            "tokenizer_config.json (or use a model whose tokenizer defines one)"
        )
    if getattr(tokenizer, "pad_id", None) is None:
        raise ValueError(
            f"the tokenizer of {where} has no pad token and no eos token to pad with; set pad_token or "
            "eos_token in its tokenizer_config.json"
        )


def env_columns(env) -> set[str]:
    """The batch columns the env lets the collector fill (anchors only if its reset reports one)."""
    _, info = env.reset(seed=0)
    columns = set(_BASE_COLUMNS)
    if "anchor" in info:
        columns |= {"anchor_ids", "anchor_texts"}
    return columns


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
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path} does not exist; pass a checkpoint such as <output_dir>/checkpoints/last.ckpt"
        )
    state = load_checkpoint_safely(path)
    return state.get("gigpo_lab", {}).get("mlflow_run_id")


def load_checkpoint_safely(path: str | Path) -> dict:
    """``torch.load(path, weights_only=True)``: tensors and plain containers only, never arbitrary objects.

    A checkpoint that holds other pickled objects (which could run code while loading) is refused with a
    clear error, as is a file that is not a checkpoint (truncated, or something else).
    """
    import pickle

    import torch

    try:
        # mmap: tensors are read only when touched, so reading the run id off a large checkpoint costs little
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower():  # not a torch checkpoint at all (e.g. invalid load key)
            raise ValueError(
                f"ckpt_path={path} is not a readable checkpoint (UnpicklingError: {str(err)[:200]}); pass "
                "another one, e.g. an earlier <output_dir>/checkpoints/iterNNNN.ckpt"
            ) from err
        lines = [ln.strip() for ln in str(err).splitlines() if "unsupported global" in ln.lower()]
        what = lines[0] if lines else "an object outside the allowed types"
        raise ValueError(
            f"ckpt_path={path} holds pickled objects other than tensors and plain containers, which could run "
            f"code when loaded, so it is refused ({what[:200]}); resume only from checkpoints gigpo-lab wrote"
        ) from err
    except Exception as err:  # truncated zip, a file of another format, …: torch raises several types
        raise ValueError(
            f"ckpt_path={path} is not a readable checkpoint ({type(err).__name__}: {str(err)[:200]}); pass "
            "another one, e.g. an earlier <output_dir>/checkpoints/iterNNNN.ckpt"
        ) from err
