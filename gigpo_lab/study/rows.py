"""A study's runs as rows: one per finished run, labelled by the spec's setting and arm, from any source.

A row is a dict: ``setting``, ``arm``, ``seed``, ``run_id``, the ``METRICS`` (each run's last value),
``wall_s`` and ``cpu_s`` (``training.run_cost.RunCost``: the CPU seconds of the run's process and its ended
children, and of the processes before it where it was resumed from a checkpoint; absent from rows written
before it existed); optionally ``recovered`` (rebuilt from an earlier analysis's per-seed
values) or ``reused`` (a ``same_runs`` copy that did not run, standing in with its original's value). Sources:

- **the store**: the finished runs of the study's MLflow experiment(s), read with
  ``gigpo_lab.analysis.runs.experiment_records`` (the lab's one MLflow reader). A run that ``gigpo-lab study
  run`` launched carries the tags ``study``, ``study_setting``, ``study_arm`` and ``seed``. A run launched
  before the study command existed (the registered study's) is labelled from its ``sweep_job_key`` tag:
  ``legacy_label`` names a job by its ``+experiments/arm=`` choice followed by its other overrides, and its
  setting by its other ``+experiments/<group>=`` choices, and each spec cell's overrides give that same label;
- **run files**: ``<out>/runs/<setting>/<arm>/seed_<n>.json``, written by each run as it finishes, so a lost
  store loses no result;
- **rows files**: a ``rows.json`` that an earlier analysis wrote;
- **a prior analysis**: an earlier ``analysis.json``'s per-seed sides (``prior_sides``), for runs that no
  other source holds.

Every source goes through ``merge``: each run once, and two different rows of one run are an error.
"""

from __future__ import annotations

import json
from pathlib import Path

from gigpo_lab.study.spec import METRICS, Spec, SpecError

#: Tags of a run that ``gigpo-lab study run`` launched.
STUDY_TAG, SETTING_TAG, ARM_TAG, HASH_TAG = "study", "study_setting", "study_arm", "study_spec_hash"
#: Overrides that are not part of a legacy label's arm.
NOT_ARM = ("seed=", "tracking.", "experiments=", "resume=", "hydra.", "hydra/")

Key = tuple[str, str, int]
#: ``(setting, arms, metric)`` -> seed -> value: the sides of an earlier analysis.
Sides = dict[tuple[str, tuple[str, ...], str], dict[int, float]]


def key(row: dict) -> Key:
    """A row's identity: ``(setting, arm, seed)``."""
    return row["setting"], row["arm"], row["seed"]


def legacy_label(tokens: list[str]) -> tuple[str, str]:
    """``(setting, arm)`` of a job from its overrides, as the registered study's rows name them."""
    arm, extra, settings = "", [], []
    for token in sorted(tokens):  # a sweep_job_key's order
        name, _, value = token.partition("=")
        if name == "+experiments/arm":
            arm = value
        elif name.startswith("+experiments/"):
            settings.append(value)
        elif not token.startswith(NOT_ARM):
            extra.append(token)
    return " ".join(settings) or "default", " ".join([arm or "default", *extra])


def legacy_names(spec: Spec) -> dict[tuple[str, str], tuple[str, str]]:
    """Legacy ``(setting, arm)`` label -> the spec's ``(setting, arm)``, for every cell of its grid."""
    return {legacy_label([*spec.settings[s], *spec.arms[a]]): (s, a) for s, a in spec.grid()}


def relabel(spec: Spec, rows: list[dict]) -> list[dict]:
    """Rows with legacy labels named by the spec; rows already named by it, or by no cell of it, unchanged."""
    names = legacy_names(spec)
    out = []
    for r in rows:
        cell = names.get((r["setting"], r["arm"]))
        out.append(r if cell is None else r | {"setting": cell[0], "arm": cell[1]})
    return out


def relabel_analysis(spec: Spec, analysis: dict) -> dict:
    """An earlier ``analysis.json`` with its legacy setting and arm labels named by the spec (contrasts'
    ``setting``, ``a``, ``b``; reruns' ``setting``, ``copy``, ``original``; arms' ``setting``, ``arm``)."""
    names = legacy_names(spec)
    settings = {legacy: s for (legacy, _), (s, _) in names.items()}

    def arm(setting: str, label: str) -> str:
        return names.get((setting, label), (None, label))[1]

    out = {}
    for name, records in analysis.items():
        if name == "same_runs":
            keys = ("copy", "original")
        elif name == "arms":
            keys = ("arm",)
        else:
            keys = ()
        new = []
        for r in records:
            r = dict(r)
            legacy_setting = r["setting"]
            r["setting"] = settings.get(legacy_setting, legacy_setting)
            for k in keys:
                r[k] = arm(legacy_setting, r[k])
            for k in ("a", "b") if "/" in name else ():
                r[k] = [arm(legacy_setting, a) for a in r[k]]
            new.append(r)
        out[name] = new
    return out


def read_store(uri: str, experiment: str, spec: Spec) -> tuple[list[dict], list[str]]:
    """The rows of the experiment's finished runs that belong to the spec's grid, sorted, and notes: two
    finished runs of one (setting, arm, seed) keep the newer; a run a resumed sweep superseded is skipped."""
    from gigpo_lab.analysis.runs import experiment_records
    from gigpo_lab.tracking.sweep_resume import JOB_KEY_TAG, SUPERSEDED_TAG

    names = legacy_names(spec)
    rows: dict[Key, dict] = {}
    notes = []
    records = experiment_records(uri, experiment, "attributes.status = 'FINISHED'")
    for run in sorted(records, key=lambda r: r.start_time):
        tags = run.tags
        if SUPERSEDED_TAG in tags:
            continue
        if tags.get(STUDY_TAG) == spec.name:
            cell = (tags[SETTING_TAG], tags[ARM_TAG])
            seed = int(tags["seed"])
        elif JOB_KEY_TAG in tags:
            tokens = tags[JOB_KEY_TAG].split()
            cell = names.get(legacy_label(tokens))
            seed = next((int(t.partition("=")[2]) for t in tokens if t.startswith("seed=")), None)
            if cell is None or seed is None:
                continue
        else:
            continue
        row = {"setting": cell[0], "arm": cell[1], "seed": seed, "run_id": run.run_id}
        row.update({k: run.final.get(m) for k, m in METRICS.items()})
        row["wall_s"] = float(tags["wall_s"]) if "wall_s" in tags else None
        row["cpu_s"] = float(tags["cpu_s"]) if "cpu_s" in tags else None
        if (*cell, seed) in rows:
            notes.append(f"{cell[0]} / {cell[1]} / seed {seed}: two finished runs, the newer kept")
        rows[(*cell, seed)] = row
    return [rows[k] for k in sorted(rows)], notes


def run_file(out: Path, setting: str, arm: str, seed: int) -> Path:
    """Where a study run writes its row as it finishes."""
    return Path(out) / "runs" / setting / arm / f"seed_{seed}.json"


def read_run_files(out: Path) -> list[dict]:
    """The rows of every run file under ``<out>/runs``, sorted."""
    found = [json.loads(p.read_text()) for p in sorted((Path(out) / "runs").glob("*/*/seed_*.json"))]
    return sorted(found, key=key)


def save_rows(path: Path, rows: list[dict]) -> None:
    """Write rows to a JSON file, one row per line."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")


def load_rows(path: Path) -> list[dict]:
    """The rows a ``save_rows`` file holds."""
    return json.loads(Path(path).read_text())


def read_sources(
    spec: Spec, *, out: Path | None = None, store: str | None = None, experiments=(), rows_files=()
) -> tuple[list[dict], list[str]]:
    """The rows of every source given, each run once (``merge``), and notes: the finished runs of
    ``experiments`` (default: the study's name) in ``store`` (a tracking URI or a sqlite path), the run files
    under ``out``, and rows files, their legacy labels named by the spec. A missing rows file is a SpecError."""
    from gigpo_lab.analysis.runs import store_uri

    read, notes = [], []
    for name in (experiments or [spec.name]) if store else ():
        found, more = read_store(store_uri(store), name, spec)
        read.append(found)
        notes += more
    if out is not None:
        read.append(read_run_files(out))
    for path in rows_files:
        if not Path(path).is_file():
            raise SpecError(f"{path}: no such file; give an existing rows.json")
        read.append(relabel(spec, load_rows(path)))
    rows, more = merge(*read)
    return rows, notes + more


def merge(*sources: list[dict]) -> tuple[list[dict], list[str]]:
    """The rows of ``sources`` in order, each (setting, arm, seed) once, and a note per one found twice; two
    rows of one key that differ in their run id or a metric are an error (two sources that disagree)."""
    rows: dict[Key, dict] = {}
    notes = []

    def same(a: dict, b: dict) -> bool:  # sources carry different extras (disk_mb, wall_s's rounding)
        return all(a.get(k) == b.get(k) for k in ("run_id", *METRICS))

    for row in (r for source in sources for r in source):
        if key(row) in rows:
            if not same(rows[key(row)], row):
                raise ValueError(f"{' / '.join(map(str, key(row)))}: two different rows; keep one source")
            notes.append(f"{' / '.join(map(str, key(row)))}: read twice, counted once")
        rows.setdefault(key(row), row)
    return list(rows.values()), notes


def prior_sides(analysis: dict) -> Sides:
    """Every side of every contrast an earlier ``analysis.json`` computed (``relabel_analysis``'s, in the
    spec's names): ``(setting, arms, metric)`` to its value per seed, over the seeds of every contrast it was a
    side of. A seed given two different values is an error."""
    sides: Sides = {}
    for name, records in analysis.items():
        if "/" not in name:  # "same_runs", "arms": not contrasts
            continue
        for r in records:
            for arms, values in ((r["a"], r.get("a_values")), (r["b"], r.get("b_values"))):
                if values is None:  # a contrast that had not run
                    continue
                side = sides.setdefault((r["setting"], tuple(arms), r["metric"]), {})
                for seed, value in zip(r["seeds"], values, strict=True):
                    if side.setdefault(seed, value) != value:
                        raise ValueError(
                            f"{r['setting']} / {arms} / seed {seed}: two values in the prior analysis"
                        )
    return sides


def rows_from_sides(sides: Sides) -> list[dict]:
    """Rows of the arms that are a whole side of a contrast, sorted and marked ``recovered``: ``setting``,
    ``arm``, ``seed`` and the metrics the sides hold; the other ``METRICS``, ``run_id`` and ``wall_s`` None."""
    rows: dict[Key, dict] = {}
    for (setting, arms, metric), values in sides.items():
        if len(arms) != 1:
            continue
        for seed, value in values.items():
            row = rows.setdefault(
                (setting, arms[0], seed),
                {"setting": setting, "arm": arms[0], "seed": seed, "run_id": None, "wall_s": None}
                | dict.fromkeys(METRICS)
                | {"recovered": True},
            )
            row[metric] = value
    return [rows[k] for k in sorted(rows)]


def reuse(spec: Spec, rows: list[dict]) -> list[dict]:
    """``rows`` plus, for each ``same_runs`` pair with ``reuse_on`` settings, each seed there that the
    original finished and the copy did not: the original's row under the copy's name, ``reused`` naming the
    original (a recorded deviation; it never counts as a run or a rerun)."""
    have = set(map(key, rows))
    added = [
        r | {"arm": pair.copy, "reused": pair.original}
        for pair in spec.same_runs
        for r in rows
        if r["setting"] in pair.reuse_on and r["arm"] == pair.original and (r["setting"], pair.copy, r["seed"]) not in have
    ]  # fmt: skip
    return rows + added


def folder_mb(folder: Path) -> float:
    """The size of every file under ``folder``, MB."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 1e6


def write_run_row(path: Path, tags: dict[str, str], seed: int, run_id: str, metrics: dict, out: Path) -> None:
    """A finished run's row, written at once to its own file (parallel jobs never share one): its setting and
    arm from the study's tags, its metrics, wall and CPU time, and ``disk_mb``, the size of its output folder."""
    row = {"setting": tags.get(SETTING_TAG, "default"), "arm": tags.get(ARM_TAG, "default"), "seed": seed,
           "run_id": run_id} | {k: metrics.get(m) for k, m in METRICS.items()}  # fmt: skip
    row |= {"wall_s": round(float(metrics.get("time/wall_s", 0.0)), 1), "disk_mb": round(folder_mb(out), 2)}
    if "time/cpu_s" in metrics:
        row["cpu_s"] = round(float(metrics["time/cpu_s"]), 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row) + "\n")
    tmp.replace(path)  # whole or absent
