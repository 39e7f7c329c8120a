"""A study's spec: one typed YAML file that names its question, grid, seeds, metric, δ, families and rule.

The spec is the single source of a pre-registered comparison: ``gigpo-lab study plan`` reads its grid,
``run`` launches it, ``analyse`` applies its families and verdict rule, and the human-readable registration is
generated from it (``gigpo_lab.study.registration_text``), so the text and the code cannot disagree.

The grid is what the families need: every arm named on a side of a contrast runs on each setting where that
contrast is tested, on the confirmatory seeds (or the family's own ``seeds``). A contrast ``A - B`` reads "A
beats B"; a side is one arm or several, averaged per seed (H4's interior against its ends).

Every key is documented once, here, on its field. A mistake is a ``SpecError`` whose one line names the key
and the fix.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

#: The metrics a study's rows hold: row key -> MLflow metric (a run's last value). A spec names them by key.
METRICS = {
    "eval_final": "eval/final",
    "eval_auc": "eval/auc",
    "greedy_success": "eval/greedy_success_rate",
    "env_steps": "rollout/env_steps_total",
}
METRIC_NAMES = tuple(METRICS)


class SpecError(ValueError):
    """A mistake in a spec: its message names the key and the fix, on one line."""


@dataclass(frozen=True)
class Seeds:
    """A half-open range of seeds, ``[start, stop)``."""

    #: First seed.
    start: int
    #: One past the last seed.
    stop: int

    @property
    def values(self) -> list[int]:
        return list(range(self.start, self.stop))


@dataclass(frozen=True)
class ContrastSpec:
    """A claim "A beats B", tested on some of its family's settings."""

    #: The claim's id ("H1"); a contrast's label is ``<name> <setting>``, or ``<name>`` in a one-setting family.
    name: str
    #: Side A: one arm, or several averaged per seed.
    a: tuple[str, ...]
    #: Side B: as ``a``.
    b: tuple[str, ...]
    #: Where it is tested; empty = every setting of its family (a claim left off a setting omits it here).
    settings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """Contrasts under one Holm correction; a confirmatory family gets verdicts, a reported one does not."""

    #: The family's name (``primary``), unique in the spec.
    name: str
    #: The settings its contrasts run on, in the order its contrasts are expanded (setting-major).
    settings: tuple[str, ...]
    #: Its claims, in order: a family's random stream draws them in this order, setting-major.
    contrasts: tuple[ContrastSpec, ...]
    #: true = verdicts by the spec's rule on its metric; false = reported with no verdict.
    confirmatory: bool = True
    #: The metric it is registered on; null = the spec's primary metric.
    metric: str | None = None
    #: Seeds of its runs; null = the spec's confirmatory seeds.
    seeds: Seeds | None = None
    #: true = every pair must be equal (a control whose arms are one computation): any difference is a bug.
    must_be_equal: bool = False
    #: The δ its verdicts use, in the primary metric's units; null = the spec's. Set it where the affordable
    #: seeds cannot detect the spec's δ: the smallest effect they can, registered before any run.
    delta: float | None = None
    #: The sentence that derives this family's δ (required with ``delta``).
    delta_reason: str = ""

    def expanded(self) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
        """``(label, setting, a, b)`` of every contrast, setting-major: the order Holm and the stream see."""
        out = []
        for setting in self.settings:
            for c in self.contrasts:
                if not c.settings or setting in c.settings:
                    label = c.name if len(self.settings) == 1 else f"{c.name} {setting}"
                    out.append((label, setting, c.a, c.b))
        return out


@dataclass(frozen=True)
class SamePair:
    """Two arms that run one configuration under two names: every seed's two runs must agree."""

    #: The arm that reruns.
    copy: str
    #: The arm it reruns.
    original: str
    #: Settings where a seed the copy lacks takes the original's row, marked ``reused`` (a recorded deviation).
    reuse_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Analysis:
    """The random streams of the bootstrap and the sign-flip test, so every number reproduces exactly."""

    #: Seed of ``numpy.random.default_rng``.
    seed: int = 20261204
    #: Resamples of the bootstrap and of the Monte-Carlo sign-flip test, per contrast.
    resamples: int = 50_000
    #: ``family``: one generator per family and metric, its contrasts drawing in order (a contrast short of 2
    #: seeds draws nothing); ``contrast``: a fresh generator per contrast (``gigpo-lab compare``'s).
    stream: str = "family"


@dataclass(frozen=True)
class Budget:
    """Limits ``plan`` checks its estimate against; null = none."""

    #: CPU-hours of the confirmatory grid.
    cpu_hours: float | None = None
    #: Disk of the confirmatory grid's runs, GB.
    disk_gb: float | None = None


@dataclass(frozen=True)
class Spec:
    """A pre-registered study."""

    #: The study's name: its MLflow experiment, its tags and its default output folder.
    name: str
    #: The question, in a sentence.
    question: str
    #: Settings: name -> the overrides that select it (``+experiments/study_env=frozenlake8x8``).
    settings: dict[str, tuple[str, ...]]
    #: Arms: name -> the overrides that make it (``+experiments/arm=gigpo``).
    arms: dict[str, tuple[str, ...]]
    #: Confirmatory seeds, every arm of a setting on the same seeds (the pairing).
    seeds: Seeds
    #: Pilot seeds, disjoint from the confirmatory ones; never pooled with them.
    pilot_seeds: Seeds
    #: The primary metric (a row key: eval_final, eval_auc, greedy_success, env_steps).
    metric: str
    #: The smallest effect worth detecting, in the primary metric's own units.
    delta: float
    #: The sentence that derives δ in those units.
    delta_reason: str
    #: The families of contrasts, in report order.
    families: tuple[Family, ...]
    #: Metrics reported beside the primary one for every contrast, never confirmatory.
    secondary: tuple[str, ...] = ()
    #: Family-wise error rate of each family.
    alpha: float = 0.05
    #: The verdict rule (``gigpo_lab.study.verdicts.RULES``).
    verdict: str = "delta"
    #: Overrides every run of the study gets (the launcher, threads).
    overrides: tuple[str, ...] = ()
    #: Arms that rerun another arm's configuration (a reproducibility check, not registered).
    same_runs: tuple[SamePair, ...] = ()
    #: The bootstrap's and the sign-flip test's random streams.
    analysis: Analysis = field(default_factory=Analysis)
    #: The CPU-hours and disk the confirmatory grid may take.
    budget: Budget = field(default_factory=Budget)

    def family_metric(self, family: Family) -> str:
        return family.metric or self.metric

    def family_delta(self, family: Family) -> float:
        return family.delta if family.delta is not None else self.delta

    def family_seeds(self, family: Family) -> list[int]:
        return (family.seeds or self.seeds).values

    def confirmatory_seeds_text(self) -> str:
        """The confirmatory seeds as text: the spec's range, or each family's where a family sets its own."""
        ranges = {f.name: f.seeds or self.seeds for f in self.families}
        if all(r == self.seeds for r in ranges.values()):
            return f"{self.seeds.start}–{self.seeds.stop - 1}"
        return ", ".join(f"{name} {r.start}–{r.stop - 1}" for name, r in ranges.items())

    def grid(self) -> dict[tuple[str, str], list[int]]:
        """``(setting, arm) -> seeds``: every run the families need, settings in spec order, then arms."""
        cells: dict[tuple[str, str], set[int]] = {}
        for family in self.families:
            for _, setting, a, b in family.expanded():
                for arm in (*a, *b):
                    cells.setdefault((setting, arm), set()).update(self.family_seeds(family))
        for pair in self.same_runs:
            for setting, arm in list(cells):
                if arm == pair.copy:
                    cells.setdefault((setting, pair.original), set()).update(cells[(setting, arm)])
        order = {s: i for i, s in enumerate(self.settings)} | {a: i for i, a in enumerate(self.arms)}
        return {k: sorted(cells[k]) for k in sorted(cells, key=lambda k: (order[k[0]], order[k[1]]))}


def spec_hash(raw: dict) -> str:
    """The spec's identity: sha256 of its parsed content, keys sorted (comments and layout do not count)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]


def _keys(where: str, raw: Any, cls: type) -> dict:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a mapping with keys {', '.join(f.name for f in fields(cls))}")
    names = [f.name for f in fields(cls)]
    for key in raw:
        if key not in names:
            raise SpecError(f"{where}.{key}: unknown key; valid keys: {', '.join(names)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    for key in required:
        if key not in raw:
            raise SpecError(f"{where}.{key}: missing; add it ({_doc(cls, key)})")
    return raw


def _doc(cls: type, key: str) -> str:
    """The field's ``#:`` comment (configdoc's reader, the same one CONFIG.md's meanings come from)."""
    from gigpo_lab.configdoc.collect import schema_docs

    return schema_docs(cls).get(key, "see gigpo_lab/study/spec.py")


def _typed(where: str, value: Any, kind: type | tuple) -> Any:
    ok = isinstance(value, kind) and not (kind in (int, float, (int, float)) and isinstance(value, bool))
    if not ok:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise SpecError(f"{where}: expected {names}, got {value!r}")
    return value


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    _typed(where, value, list)
    return tuple(_typed(f"{where}[{i}]", v, str) for i, v in enumerate(value))


def _seeds(where: str, raw: Any) -> Seeds:
    raw = _keys(where, raw, Seeds)
    seeds = Seeds(_typed(f"{where}.start", raw["start"], int), _typed(f"{where}.stop", raw["stop"], int))
    if seeds.stop - seeds.start < 2:
        raise SpecError(
            f"{where}: stop - start = {seeds.stop - seeds.start}; a paired test needs 2 seeds or more"
        )
    return seeds


def _named(where: str, raw: Any) -> dict[str, tuple[str, ...]]:
    _typed(where, raw, dict)
    if not raw:
        raise SpecError(f"{where}: empty; name at least one, each with its overrides")
    return {str(name): _strings(f"{where}.{name}", ovr) for name, ovr in raw.items()}


def _one_of(where: str, value: Any, valid: tuple[str, ...] | list[str]) -> str:
    if value not in valid:
        raise SpecError(f"{where}: {value!r} is not one of {', '.join(map(str, valid))}")
    return value


def _contrast(where: str, raw: Any, spec_settings: tuple[str, ...], arms: dict) -> ContrastSpec:
    raw = _keys(where, raw, ContrastSpec)
    a, b = _strings(f"{where}.a", raw["a"]), _strings(f"{where}.b", raw["b"])
    for side, names in (("a", a), ("b", b)):
        for name in names:
            _one_of(f"{where}.{side}", name, list(arms))
    if set(a) & set(b):
        raise SpecError(f"{where}: arm(s) {', '.join(sorted(set(a) & set(b)))} on both sides; remove one")
    where_ = _strings(f"{where}.settings", raw.get("settings", []))
    for s in where_:
        _one_of(f"{where}.settings", s, spec_settings)
    return ContrastSpec(_typed(f"{where}.name", raw["name"], str), a, b, where_)


def _family(where: str, raw: Any, settings: dict, arms: dict, metrics: tuple[str, ...]) -> Family:
    raw = _keys(where, raw, Family)
    own = _strings(f"{where}.settings", raw["settings"])
    for s in own:
        _one_of(f"{where}.settings", s, list(settings))
    contrasts = tuple(
        _contrast(f"{where}.contrasts[{i}]", c, own, arms)
        for i, c in enumerate(_typed(f"{where}.contrasts", raw["contrasts"], list))
    )
    if not contrasts:
        raise SpecError(f"{where}.contrasts: empty; list at least one contrast")
    metric = raw.get("metric")
    if metric is not None:
        _one_of(f"{where}.metric", metric, metrics)
        if raw.get("confirmatory", True) and metric != metrics[0]:
            raise SpecError(f"{where}.metric: a confirmatory family is judged on the primary metric ({metrics[0]}, "
                            "the units of delta); drop the key or set confirmatory: false")  # fmt: skip
    family = Family(
        _typed(f"{where}.name", raw["name"], str),
        own,
        contrasts,
        bool(_typed(f"{where}.confirmatory", raw.get("confirmatory", True), bool)),
        metric,
        _seeds(f"{where}.seeds", raw["seeds"]) if raw.get("seeds") is not None else None,
        bool(_typed(f"{where}.must_be_equal", raw.get("must_be_equal", False), bool)),
        *_family_delta(where, raw),
    )
    labels = [label for label, *_ in family.expanded()]
    if len(set(labels)) != len(labels):
        raise SpecError(
            f"{where}.contrasts: two contrasts share a name on one setting; give each its own name"
        )
    return family


def _family_delta(where: str, raw: dict) -> tuple[float | None, str]:
    """A family's own ``delta`` and ``delta_reason``: both or neither; δ > 0, on a confirmatory family."""
    if raw.get("delta") is None:
        if raw.get("delta_reason"):
            raise SpecError(f"{where}.delta_reason: given without delta; add delta or drop the reason")
        return None, ""
    delta = float(_typed(f"{where}.delta", raw["delta"], (int, float)))
    reason = _typed(f"{where}.delta_reason", raw.get("delta_reason", ""), str)
    if delta <= 0:
        raise SpecError(f"{where}.delta: {delta} must be > 0, in the primary metric's own units")
    if not reason.strip():
        raise SpecError(f"{where}.delta_reason: required with delta; say how the affordable seeds give it")
    if not raw.get("confirmatory", True):
        raise SpecError(f"{where}.delta: a reported family has no verdicts to judge; drop delta")
    return delta, reason


def parse_spec(raw: Any, where: str = "spec") -> Spec:
    """A ``Spec`` from a parsed YAML mapping; ``SpecError`` names the first mistake."""
    from gigpo_lab.study.verdicts import RULES

    raw = _keys(where, raw, Spec)
    settings = _named(f"{where}.settings", raw["settings"])
    arms = _named(f"{where}.arms", raw["arms"])
    metric = _one_of(f"{where}.metric", raw["metric"], METRIC_NAMES)
    secondary = _strings(f"{where}.secondary", raw.get("secondary", []))
    for m in secondary:
        _one_of(f"{where}.secondary", m, [n for n in METRIC_NAMES if n != metric])
    delta = float(_typed(f"{where}.delta", raw["delta"], (int, float)))
    if delta <= 0:
        raise SpecError(f"{where}.delta: {delta} must be > 0, in {metric}'s own units")
    alpha = float(_typed(f"{where}.alpha", raw.get("alpha", 0.05), (int, float)))
    if not 0 < alpha < 1:
        raise SpecError(f"{where}.alpha: {alpha} must lie in (0, 1); 0.05 is usual")
    metrics = (metric, *secondary)
    families = tuple(
        _family(f"{where}.families[{i}]", f, settings, arms, metrics)
        for i, f in enumerate(_typed(f"{where}.families", raw["families"], list))
    )
    if not families:
        raise SpecError(f"{where}.families: empty; list at least one family of contrasts")
    names = [f.name for f in families]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}.families: two families named alike; give each its own name")
    same = []
    for i, pair in enumerate(_typed(f"{where}.same_runs", raw.get("same_runs", []), list)):
        pair = _keys(f"{where}.same_runs[{i}]", pair, SamePair)
        copy = _one_of(f"{where}.same_runs[{i}].copy", pair["copy"], list(arms))
        original = _one_of(f"{where}.same_runs[{i}].original", pair["original"], list(arms))
        reuse = _strings(f"{where}.same_runs[{i}].reuse_on", pair.get("reuse_on", []))
        for s in reuse:
            _one_of(f"{where}.same_runs[{i}].reuse_on", s, list(settings))
        same.append(SamePair(copy, original, reuse))
    analysis = _keys(f"{where}.analysis", raw.get("analysis", {}), Analysis)
    analysis = Analysis(
        _typed(f"{where}.analysis.seed", analysis.get("seed", Analysis.seed), int),
        _typed(f"{where}.analysis.resamples", analysis.get("resamples", Analysis.resamples), int),
        _one_of(f"{where}.analysis.stream", analysis.get("stream", Analysis.stream), ("family", "contrast")),
    )
    if analysis.resamples < 100:
        raise SpecError(
            f"{where}.analysis.resamples: {analysis.resamples}; use at least 100 (50000 to publish)"
        )
    budget = _keys(f"{where}.budget", raw.get("budget", {}), Budget)
    for key in ("cpu_hours", "disk_gb"):
        if budget.get(key) is not None:
            _typed(f"{where}.budget.{key}", budget[key], (int, float))
    spec = Spec(
        name=_typed(f"{where}.name", raw["name"], str),
        question=_typed(f"{where}.question", raw["question"], str),
        settings=settings,
        arms=arms,
        seeds=_seeds(f"{where}.seeds", raw["seeds"]),
        pilot_seeds=_seeds(f"{where}.pilot_seeds", raw["pilot_seeds"]),
        metric=metric,
        delta=delta,
        delta_reason=_typed(f"{where}.delta_reason", raw["delta_reason"], str),
        families=families,
        secondary=secondary,
        alpha=alpha,
        verdict=_one_of(f"{where}.verdict", raw.get("verdict", "delta"), list(RULES)),
        overrides=_strings(f"{where}.overrides", raw.get("overrides", [])),
        same_runs=tuple(same),
        analysis=analysis,
        budget=Budget(budget.get("cpu_hours"), budget.get("disk_gb")),
    )
    seen: dict[frozenset, str] = {}
    for name, overrides in arms.items():
        if (twin := seen.setdefault(frozenset(overrides), name)) != name:
            raise SpecError(f"{where}.arms.{name}: the same overrides as {twin}; a run is one arm's, so remove one "
                            "(to check that two spellings are one config, write them differently)")  # fmt: skip
    for label, seeds in (
        ("seeds", spec.seeds),
        *((f"families.{f.name}.seeds", f.seeds) for f in spec.families),
    ):
        if seeds is not None and set(seeds.values) & set(spec.pilot_seeds.values):
            raise SpecError(f"{where}.pilot_seeds: overlaps {label}; pick a disjoint range")
    if not spec.name.replace("-", "").replace("_", "").isalnum():
        raise SpecError(f"{where}.name: {spec.name!r}; use letters, digits, - and _ (it names folders)")
    return spec


@dataclass(frozen=True)
class LoadedSpec:
    """A spec with where it came from and its hash."""

    spec: Spec
    path: Path
    raw: dict
    hash: str


#: Where a spec given by name (not by path) is looked up, under the config root: a wheel carries it.
SPEC_FOLDER = "experiments/studies"


def find_spec(name_or_path: str) -> Path:
    """A spec's file: the path itself, else ``<config root>/experiments/studies/<name>.yaml``."""
    from gigpo_lab.config_paths import config_root

    path = Path(name_or_path)
    if path.is_file():
        return path
    folder = config_root() / SPEC_FOLDER
    packaged = folder / f"{name_or_path}.yaml"
    if packaged.is_file():
        return packaged
    known = sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.endswith(".registration"))
    raise SpecError(
        f"{name_or_path}: no such spec file; give a path, or one of the lab's: {', '.join(known)}"
    )


def load_spec(name_or_path: str) -> LoadedSpec:
    """Read, parse and check a spec; ``SpecError`` on any mistake."""
    import yaml

    path = find_spec(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(f"{path}: not valid YAML{at}; fix the syntax there") from None
    return LoadedSpec(parse_spec(raw, where=path.stem), path, raw, spec_hash(raw))
