"""``validate_config``: the checks on the composed config alone, before anything is run or written.

The estimator, the exploration bonus and the group filter are built here (``COMPONENTS``): each checks its
own parameters against its schema (``gigpo_lab.algorithm.settings``), so a bad value of one of them is refused
by its class, once. Every other group's bounded values (``trainer``, ``rollout``, ``env``: a schema field
declared with ``param(default, low=...)``) are checked against their field (``check_bounds``), so a bound is
written once, on the field. The checks below are the rest: the rules that span several keys or groups.
Each refusal is a ``ConfigError`` (``gigpo_lab.errors``) of one sentence that names the key, the value and
the fix. Cheap to import (no torch), so it is testable without building a run.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from gigpo_lab.algorithm.settings import build_checked, check_bounds
from gigpo_lab.config_paths import hydra_choices
from gigpo_lab.errors import ConfigError

#: The config groups whose object checks its own parameters when built: built here, before the run starts.
COMPONENTS = ("estimator", "exploration", "group_filter")


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
        group = hydra_choices().get(key.split(".", 1)[0])
        where = f" with {key.split('.', 1)[0]}={group}" if group else ""
        raise ConfigError(f"{key} is required{where} and has no default; add {key}=<value> to the command")
    for group in COMPONENTS:  # each refuses its own bad values, naming the key (gigpo_lab.algorithm.settings)
        build_checked(group, cfg[group], get_class(cfg[group]._target_))
    for group in cfg:
        if group not in COMPONENTS and group != "hydra" and _holds_keys(cfg, group):
            check_schema_bounds(str(group), cfg[group])
    checks = []
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
    checks.extend(_no_repeat_checks(cfg))
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
    tokens = cfg.trainer.shared_prefix_tokens  # None or an int >= 0 (its schema bound)
    checks.append(
        (
            not tokens or shared,
            f"trainer.shared_prefix_tokens={tokens} bounds the packed chunks of trainer.shared_prefix=true; set "
            "trainer.shared_prefix=true (and a positive budget), or trainer.shared_prefix_tokens=null",
        )
    )
    share = OmegaConf.select(cfg, "group_filter.share")  # group_filter=top_std, in (0, 1] (TopStd checked it)
    if share is not None:
        checks.append(
            (
                int(share * cfg.rollout.groups) >= 1,
                f"group_filter.share={share} keeps int({share} x rollout.groups={cfg.rollout.groups}) = 0 groups; "
                f"set group_filter.share to at least 1/{cfg.rollout.groups} or raise rollout.groups",
            )
        )
    checks.extend(_sharding_checks(cfg, tiny, shared))
    checks.append(_model_folder_check(cfg.model))
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    if (
        OmegaConf.select(cfg, "env.id") == "gigpo_lab/TextWorld-v0"
    ):  # the user's game files, before the run opens
        from gigpo_lab.envs.textworld_games import check_env_config

        check_env_config(cfg.env)


def check_schema_bounds(key: str, node: DictConfig) -> None:
    """The bounded values of ``node`` (config key ``key``) and of the nodes below it, each against the schema
    field that declares its bound (``param``); an untyped node has none."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        check_bounds(key, schema, node)
    for child in node:
        if _holds_keys(node, child):
            check_schema_bounds(f"{key}.{child}", node[child])


def _holds_keys(node: DictConfig, key) -> bool:
    """Whether ``node[key]`` is a mapping, read without resolving an interpolation (Hydra's need a run)."""
    return not OmegaConf.is_interpolation(node, key) and isinstance(node[key], DictConfig)


def _no_repeat_checks(cfg: DictConfig) -> list[tuple[bool, str]]:
    """What ``env.no_repeat=true`` (the no-repeat control, ``gigpo_lab/envs/no_repeat.py``) cannot run with."""
    if not cfg.env.get("no_repeat", False):
        return []
    return [
        (
            cfg.env.get("_target_") == MAKE_ENV,
            f"env.no_repeat=true wraps the env that {MAKE_ENV} builds, and env._target_ is "
            f"{cfg.env.get('_target_')}; set env._target_={MAKE_ENV} or env.no_repeat=false",
        ),
        (
            cfg.estimator.get("anchor_similarity_threshold") is None,
            "env.no_repeat=true makes every anchor unique by a short suffix, which "
            "estimator.anchor_similarity_threshold would cluster back together; set "
            "estimator.anchor_similarity_threshold=null or env.no_repeat=false",
        ),
    ]


#: ``env._target_`` of every env option (``gigpo_lab/envs/factory.py``; no gymnasium import here).
MAKE_ENV = "gigpo_lab.envs.make_env"
#: ``lightning.strategy._target_`` of ``lightning=fsdp`` (``gigpo_lab/training/fsdp.py``; no torch import here).
SHARDED_STRATEGY = "gigpo_lab.training.fsdp.ShardedStrategy"


def _sharding_checks(cfg: DictConfig, tiny: bool, shared: bool) -> list[tuple[bool, str]]:
    """What ``lightning=fsdp`` cannot run: the tiny policy (no decoder layers to shard), packed updates, and
    checkpoints without the frozen base (``gigpo_lab/policy/frozen_base.py``)."""
    strategy = OmegaConf.select(cfg, "lightning.strategy")
    if not (isinstance(strategy, DictConfig) and strategy.get("_target_") == SHARDED_STRATEGY):
        return []
    return [
        (
            not tiny,
            "lightning=fsdp shards a Hugging Face model's decoder layers, and model=tiny has none; use "
            "lightning=ddp for the tiny policy, or model=hf model.path=<folder> (or model=smollm2_135m)",
        ),
        (
            not shared,
            "trainer.shared_prefix=true with lightning=fsdp: packed chunks are bounded by tokens, so the ranks "
            "would run different numbers of sharded forwards and hang; set trainer.shared_prefix=false",
        ),
        (
            cfg.trainer.checkpoint_frozen_base,
            "trainer.checkpoint_frozen_base=false with lightning=fsdp: the sharded strategy loads a checkpoint's "
            "weights itself, before the left-out ones can be put back; set trainer.checkpoint_frozen_base=true "
            "(in a study: gigpo-lab study run --keep-checkpoints)",
        ),
    ]


def _model_folder_check(model: DictConfig) -> tuple[bool, str]:
    """A ``model.path`` that names no file or folder is refused here (loading it would fail after seconds)."""
    path = model.get("path")
    if not isinstance(path, str) or Path(path).expanduser().exists():
        return True, ""
    return False, (
        f"model.path={path}: no such folder; point it at a Hugging Face model folder (config.json, weights "
        "and tokenizer files)"
    )
