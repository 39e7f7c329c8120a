"""Where the Hydra configs live, and how the lab composes them from any working directory.

The config root holds ``conf/`` (the primary config dir), ``experiments/`` and ``sweeps/``. In a source
checkout or an editable install it is the repository root; a wheel carries a copy in
``gigpo_lab/_configs`` (written by ``setup.py``'s build step). ``experiments/`` and ``sweeps/`` join Hydra's
search path through ``hydra.searchpath`` in ``conf/config.yaml``, which names the root with the resolver
``${gigpo_lab.config_root:}`` registered here, so ``experiments=NAME`` and ``sweeps=NAME`` resolve from any
working directory and from a wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

_PACKAGE = Path(__file__).resolve().parent


def config_root() -> Path:
    """The folder that holds ``conf/``, ``experiments/`` and ``sweeps/``."""
    packaged = _PACKAGE / "_configs"
    if (packaged / "conf" / "config.yaml").is_file():
        return packaged
    return _PACKAGE.parent


def conf_dir() -> Path:
    """Hydra's primary config directory (``<root>/conf``)."""
    return config_root() / "conf"


def _register_resolver() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("gigpo_lab.config_root", lambda: str(config_root()), replace=True)


_register_resolver()


@dataclass
class RunKeys:
    """The run-level keys of ``conf/config.yaml`` (their values are set there, once). Hydra cannot type the
    root config with a schema without listing every config group in it, so this class only documents them
    (``gigpo-lab docs``); a test keeps its fields equal to the root's keys."""

    #: Run seed: model init, env group seeds and sampling all derive from it.
    seed: int
    #: Checkpoints and artifacts go here; null = Hydra's run directory (outputs/<date>/<time>).
    output_dir: Optional[str]  # noqa: UP045
    #: Resume from this checkpoint (e.g. <output_dir>/checkpoints/last.ckpt); null = a fresh run.
    ckpt_path: Optional[str]  # noqa: UP045
    #: true = every log line (Lightning, MLflow, Hydra), warnings, and the traceback of an error.
    verbose: bool
    #: In a multirun (-m): true = go on with the sweep launched earlier with the same overrides: its jobs whose
    #: runs FINISHED are skipped, the others run again (gigpo_lab/tracking/sweep_resume.py).
    resume: bool


#: What each config group selects (CONFIG.md's group table), one line each.
GROUP_HELP: dict[str, str] = {
    "estimator": "advantage estimator",
    "env": "environment",
    "model": "policy: tiny (a small transformer trained from scratch) or a Hugging Face causal LM",
    "rollout": "rollout engine, sampling and collection sizes (B groups x G envs)",
    "loss": "clipped surrogate (PPO's per-token ratio, or GSPO's per-turn one) + KL to the reference + entropy bonus",
    "exploration": "exploration bonus: a count-based novelty bonus as its own advantage stream, annealed; or none",
    "group_filter": "which collected groups to train on: all (none), DAPO's nonconstant, StarPO-S's top_std",
    "trainer": "the iteration loop: iterations, PPO epochs, minibatches, optimizer, schedules",
    "lightning": "where it runs: accelerator, devices, strategy, precision, threads",
    "tracking": "MLflow store, experiment name and artifacts",
    "sweeps": "a multirun definition from sweeps/ (off by default)",
    "experiments": "an experiment override file from experiments/ (off by default)",
}


#: Packages whose every module may declare ``SCHEMAS`` ({"<group>/<option>": dataclass}) next to its class:
#: an estimator or env module brings its own schema (``gigpo_lab.discovery``).
SCHEMA_PACKAGES = ("gigpo_lab.algorithm", "gigpo_lab.envs")
#: Modules whose ``SCHEMAS`` type the options of the other config groups.
SCHEMA_MODULES = (
    "gigpo_lab.policy.schema",
    "gigpo_lab.rollout.schema",
    "gigpo_lab.training.schema",
    "gigpo_lab.tracking.schema",
)
#: The ConfigStore group that holds every schema as ``schema/<group>/<option>``, never listed as an option of
#: ``<group>``: a YAML option that sets values extends its schema with
#: ``defaults: [/schema/<group>/<option>@_here_, _self_]`` (``conf/env/taxi.yaml``).
SCHEMA_ROOT = "schema"
#: A schema with this name is only a parent for other options (``env/base``, ``rollout/base``), not an option.
BASE = "base"


def register_schemas() -> None:
    """Store every structured-config schema in Hydra's ConfigStore (idempotent): under ``schema/<group>``, and,
    unless it is a ``base`` or ``conf/<group>/<option>.yaml`` exists (an option that sets values of its own),
    as the option ``<group>/<option>`` itself, so that an option equal to its schema needs no YAML file.
    Hydra lists these options with the files' when an option name is wrong."""

    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    schemas = all_schemas()
    if _STORED.get(id(store)) == schemas and SCHEMA_ROOT in store.repo:
        return  # stored already: each store converts the dataclass again (``gigpo-lab docs`` composes ~40 times)
    for key, node in schemas.items():
        group, name = key.rsplit("/", 1)
        store.store(group=f"{SCHEMA_ROOT}/{group}", name=name, node=node)
        if name != BASE and not (conf_dir() / group / f"{name}.yaml").is_file():
            store.store(group=group, name=name, node=node)
    _STORED[id(store)] = schemas


#: What ``register_schemas`` stored last, by ConfigStore (``id``): a test may clear or replace the store.
_STORED: dict[int, dict[str, type]] = {}


def config_groups() -> dict[str, list[str]]:
    """Every config group of the lab (Hydra's own ``hydra/`` aside) and its options, sorted: the YAML files of
    ``conf/<group>/`` and the schemas that are options themselves (``register_schemas``)."""
    groups: dict[str, set[str]] = {}
    for folder in conf_dir().iterdir():
        if folder.is_dir() and folder.name != "hydra":
            groups.setdefault(folder.name, set()).update(p.stem for p in folder.glob("*.yaml"))
    for key in all_schemas():
        group, name = key.rsplit("/", 1)
        if name != BASE:
            groups.setdefault(group, set()).add(name)
    return {g: sorted(groups[g]) for g in sorted(groups)}


def all_schemas() -> dict[str, type]:
    """Every schema, ``{"<group>/<option>": dataclass}``: the discovered ones and the listed modules'."""
    import importlib

    from gigpo_lab.discovery import declared_schemas

    found: dict[str, type] = {}
    for package in SCHEMA_PACKAGES:
        found.update(declared_schemas(package))
    for module in SCHEMA_MODULES:
        found.update(importlib.import_module(module).SCHEMAS)
    return found


def compose_config(overrides: list[str] | tuple[str, ...] = (), return_hydra_config: bool = False):
    """Compose the lab's config the way ``gigpo-lab train`` does, without running it (for tests and notebooks)."""
    from hydra import compose, initialize_config_dir

    register_schemas()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(
            config_name="config",
            overrides=list(overrides),
            return_hydra_config=return_hydra_config,
        )


def quoted_override(key: str, value: object) -> str:
    """``key='value'``: an override whose value Hydra takes as it is. Unquoted, a path that holds ``=``, ``,``
    or brackets (a folder named after overrides, ``seed_robustness.py``'s default) fails to parse; inside
    quotes only a quote and ``${`` need escaping."""
    text = str(value).replace("'", "\\'").replace("${", "\\${")
    return f"{key}='{text}'"


def hydra_choices() -> dict[str, str]:
    """The option chosen in each config group of the running Hydra job (``{"model": "tiny", ...}``); ``{}``
    outside a Hydra job (``compose_config``, ``train(cfg)`` from Python)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    return {k: str(v) for k, v in HydraConfig.get().runtime.choices.items() if v is not None}


def in_multirun() -> bool:
    """Whether this process is a job of a Hydra multirun (``-m``); False outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and str(HydraConfig.get().mode) == "RunMode.MULTIRUN"
