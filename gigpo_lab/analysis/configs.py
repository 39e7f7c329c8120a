"""Configurations: which of the compared runs are seeds of the same setup.

A configuration is identified by **every resolved setting that differs between the compared runs** (the
params, i.e. the flattened config), apart from:

- run-specific keys (``RUN_SPECIFIC``): the seed, where outputs and checkpoints go, tracking, and resources
  or display switches that do not change what is learned (torch threads, the progress bar);
- settings derived from the seed: a key named ``*seed*`` whose value is one-to-one with the run seed, such
  as ``model.seed: ${seed}``.

So two runs that differ only in their seed are one configuration, and a research-config run (KL 0.01, no
entropy bonus) never shares a row with a default-config run. A seed that appears twice in one configuration
is counted once: the latest run is kept and a warning names the others.

A configuration's label leads with the estimator and ω, adds env and model where they differ, and then
every other differing setting that the estimator, ω, env and model do not already determine, e.g.
``gigpo ω=1 loss.kl_coef=0.01``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gigpo_lab.analysis.runs import RunRecord

#: Keys (or ``prefix.``) that never distinguish configurations: they are per run or do not affect learning.
RUN_SPECIFIC = (
    "seed",
    "output_dir",
    "ckpt_path",
    "tracking.",
    "hydra.",
    "trainer.num_threads",
    "trainer.progress_bar",  # where runs logged before the lightning group existed
    "lightning.num_threads",
    "lightning.progress_bar",
    "verbose",
)
LABEL_VALUE_CHARS = 24  # longer setting values are cut in labels (the full value is in the run's params)


def run_specific(key: str) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in RUN_SPECIFIC)


def seed_derived(key: str, records: Sequence[RunRecord]) -> bool:
    """Whether ``key`` is named like a seed and maps one-to-one to the runs' seeds (e.g. ``model.seed``)."""
    if "seed" not in key.rsplit(".", 1)[-1]:
        return False
    forward: dict[str, str | None] = {}
    backward: dict[str | None, str] = {}
    for r in records:
        value = r.params.get(key)
        if forward.setdefault(r.seed, value) != value or backward.setdefault(value, r.seed) != r.seed:
            return False
    return True


def varying_settings(records: Sequence[RunRecord]) -> list[str]:
    """The param keys whose values differ between ``records`` (a missing key counts as its own value)."""
    keys = sorted(set().union(*(r.params for r in records)))
    return [
        k
        for k in keys
        if not run_specific(k)
        and len({r.params.get(k) for r in records}) > 1
        and not seed_derived(k, records)
    ]


@dataclass
class Config:
    """One configuration: the values of the differing settings, and one run per seed."""

    settings: dict[str, str | None]  # differing key -> this configuration's value (None: not set)
    runs: list[RunRecord]  # one per seed (the latest where a seed repeats), every status
    dropped: list[RunRecord] = field(default_factory=list)  # older runs of a repeated seed, not counted
    tokens: list[str] = field(default_factory=list)  # the label, e.g. ["gigpo", "ω=1", "sokoban"]
    task: tuple = ()  # the env identity (env name and env.* settings): a stratum of the statistics
    method: tuple = ()  # the label without what the env determines: one line across envs

    @property
    def label(self) -> str:
        return " ".join(self.tokens)

    @property
    def estimator(self) -> str:
        return self.runs[0].estimator

    @property
    def omega(self) -> float | None:
        return self.runs[0].omega

    @property
    def env(self) -> str:
        return self.runs[0].env

    @property
    def model(self) -> str:
        return self.runs[0].model

    @property
    def finished(self) -> list[RunRecord]:
        return [r for r in self.runs if r.finished]

    @property
    def failed(self) -> list[RunRecord]:
        """Every run that did not finish (FAILED, KILLED, or RUNNING left by a crashed process)."""
        return [r for r in self.runs if not r.finished]


def _determined(key: str, configs: Sequence[Config], by) -> bool:
    """Whether the value of setting ``key`` is constant among the configurations that share ``by(config)``."""
    seen: dict = {}
    return all(seen.setdefault(by(c), c.settings[key]) == c.settings[key] for c in configs)


def _short(value: str | None) -> str:
    text = str(value)
    return text if len(text) <= LABEL_VALUE_CHARS else text[: LABEL_VALUE_CHARS - 1] + "…"


def _label(configs: list[Config], keys: list[str]) -> None:
    """Fill each configuration's ``tokens``, ``task`` and ``method``."""
    shown = [col for col in ("env", "model") if len({getattr(c, col) for c in configs}) > 1]

    def base(c: Config) -> tuple:
        return (c.estimator, c.omega, *(getattr(c, col) for col in shown))

    extras = [k for k in keys if not _determined(k, configs, base)]
    env_keys = [k for k in keys if k.startswith("env.")]
    for c in configs:
        c.task = (c.env, *(c.settings[k] for k in env_keys))
    by_env = [
        k for k in extras if len({c.task for c in configs}) > 1 and _determined(k, configs, lambda c: c.task)
    ]
    for c in configs:
        omega = [] if c.omega is None else [f"ω={c.omega:g}"]
        columns = [str(getattr(c, col)) for col in shown]
        settings = [f"{k}={_short(c.settings[k])}" for k in extras]
        c.tokens = [c.estimator, *omega, *columns, *settings]
        c.method = (
            c.estimator,
            *omega,
            *(v for col, v in zip(shown, columns, strict=True) if col != "env"),
            *(
                s
                for k, s in zip(extras, settings, strict=True)
                if k not in by_env and not k.startswith("env.")
            ),
        )


def _dedupe(config: Config, warnings: list[str]) -> None:
    """Keep the latest run of every seed; warn about the others."""
    by_seed: dict[str, list[RunRecord]] = {}
    for run in sorted(config.runs, key=lambda r: (r.start_time, r.run_id)):
        by_seed.setdefault(run.seed, []).append(run)
    config.runs = [runs[-1] for runs in by_seed.values()]
    for seed, runs in by_seed.items():
        if len(runs) > 1:
            kept, older = runs[-1], runs[:-1]
            config.dropped.extend(older)
            warnings.append(
                f"seed {seed} appears {len(runs)} times in configuration {config.label!r}: counting only the "
                f"latest run, {kept.name} ({kept.run_id}, {kept.status}); not counted: "
                + ", ".join(f"{r.name} ({r.run_id}, {r.status})" for r in older)
            )


def _order(c: Config) -> tuple:
    return (c.estimator, c.omega is not None, c.omega or 0.0, c.env, c.model, c.tokens)


def group_configs(records: Sequence[RunRecord]) -> tuple[list[Config], list[str]]:
    """The configurations of ``records``, sorted by estimator, ω, env, model; and the duplicate-seed warnings."""
    keys = varying_settings(records)
    groups: dict[tuple, list[RunRecord]] = {}
    for rec in records:
        groups.setdefault(tuple(rec.params.get(k) for k in keys), []).append(rec)
    configs = [Config(dict(zip(keys, ident, strict=True)), runs) for ident, runs in groups.items()]
    _label(configs, keys)
    configs.sort(key=_order)
    warnings: list[str] = []
    for c in configs:
        _dedupe(c, warnings)
    return configs, warnings
