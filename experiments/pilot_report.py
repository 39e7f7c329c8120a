"""The pilot's report: spread and wall time per arm, floor and ceiling per setting, and the seeds per arm
that the study's primary contrasts need (issue #45 item 7, the input to experiments/PREREGISTRATION.md).

    python experiments/pilot_report.py --store sqlite:///pilot.db --out experiments/results/pilot

Reads every finished run of the experiment (``study_runs.read_runs``) and writes ``per_seed.json`` (every run)
and ``report.md``:

- per setting and arm: n, the mean of ``eval/final`` and ``eval/auc`` with 95% percentile-bootstrap intervals
  (``estimator_rows.mean_ci``, 50,000 resamples) and their sd over seeds, the last greedy success, and the
  median wall time of a run;
- per setting: whether every arm sits at the floor (mean ``eval/final`` <= 0.05) or the ceiling (>= 0.95);
- per primary contrast of the study (``study_analysis.FAMILIES["primary"]``): the sd of the paired differences
  over shared seeds, and the seeds per arm (``gigpo_lab.analysis.power.seeds_for``) that detect a true mean difference of each
  ``DELTAS`` with power 0.8 under Holm over the whole family (planned at 0.05 / family size). The pilot's own
  mean difference is printed as a pilot observation, never as a result.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import study_runs
from estimator_rows import mean_ci
from study_analysis import FAMILIES, side_values

from gigpo_lab.analysis.power import planning_alpha, seeds_for

METRICS = ("eval_final", "eval_auc")
DELTAS = (0.05, 0.10)
FLOOR, CEILING = 0.05, 0.95
POWER, ALPHA = 0.8, 0.05


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def arm_table(rows: list[dict]) -> list[str]:
    """Markdown rows: per (setting, arm) the spreads and the median wall time."""
    lines = [
        "| setting | arm | n | eval/final [95% CI] | sd | eval/auc [95% CI] | sd | greedy, last | wall s (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, arm in sorted({(r["setting"], r["arm"]) for r in rows}):
        mine = [r for r in rows if (r["setting"], r["arm"]) == (setting, arm)]
        cells = []
        for key in METRICS:
            values = [r[key] for r in mine]
            m, lo, hi = mean_ci(values)
            cells += [f"{m:.3f} [{lo:.3f}, {hi:.3f}]", f"{_sd(values):.3f}"]
        greedy = statistics.mean(r["greedy_success"] for r in mine)
        wall = statistics.median(r["wall_s"] for r in mine if r["wall_s"] is not None)
        lines.append(f"| {setting} | {arm} | {len(mine)} | {' | '.join(cells)} | {greedy:.2f} | {wall:.0f} |")
    return lines


def floor_ceiling(rows: list[dict]) -> list[str]:
    """One line per setting where every arm's mean ``eval/final`` is at the floor or the ceiling."""
    notes = []
    for setting in sorted({r["setting"] for r in rows}):
        means = [
            statistics.mean(r["eval_final"] for r in rows if (r["setting"], r["arm"]) == (setting, arm))
            for arm in {r["arm"] for r in rows if r["setting"] == setting}
        ]
        for name, hit in (
            ("floor", all(m <= FLOOR for m in means)),
            ("ceiling", all(m >= CEILING for m in means)),
        ):
            if hit:
                notes.append(f"{setting}: every arm at the {name} on eval/final")
    return notes


def pairs(rows: list[dict], setting: str, a: str, b: str, key: str) -> np.ndarray:
    """The paired differences a - b of ``key`` over the seeds both arms finished in ``setting``, (n,)."""
    va, vb = side_values(rows, setting, (a,), key), side_values(rows, setting, (b,), key)
    return np.asarray([va[s] - vb[s] for s in sorted(set(va) & set(vb))], dtype=float)


def power_table(rows: list[dict]) -> tuple[list[str], list[dict]]:
    """Markdown rows and records: per setting, primary contrast and metric, sd_d and seeds per arm."""
    present = {(r["setting"], r["arm"]) for r in rows}
    family = [
        (c.setting, c.a[0], c.b[0])
        for c in FAMILIES["primary"]
        if (c.setting, c.a[0]) in present and (c.setting, c.b[0]) in present
    ]
    alpha = planning_alpha(ALPHA, max(1, len(family)))
    deltas = " | ".join(f"seeds for δ = {d}" for d in DELTAS)
    lines = [
        f"Family: {len(family)} contrasts; each planned at α = {ALPHA} / {max(1, len(family))} = {alpha:.4f}, "
        f"power {POWER}, two-sided paired t-test on the pilot's sd of the differences.",
        "",
        f"| setting | contrast | metric | pairs | pilot mean diff | sd of diffs | {deltas} |",
        "|---|---|---|---|---|---|" + "---|" * len(DELTAS),
    ]
    records = []
    for setting, a, b in family:
        for key in METRICS:
            d = pairs(rows, setting, a, b, key)
            sd = _sd(list(d))
            need = [seeds_for(delta, sd, alpha, POWER) if len(d) > 1 else None for delta in DELTAS]
            records.append(
                {
                    "setting": setting,
                    "contrast": f"{a}-{b}",
                    "metric": key,
                    "pairs": len(d),
                    "mean_diff": float(d.mean()) if len(d) else None,
                    "sd_diff": sd,
                    "seeds": dict(zip(map(str, DELTAS), need, strict=True)),
                }  # fmt: skip
            )
            shown = " | ".join("-" if n is None else str(n) for n in need)
            lines.append(
                f"| {setting} | {a} - {b} | {key} | {len(d)} | {d.mean():+.3f} | {sd:.3f} | {shown} |"
            )
    return lines, records


def report(rows: list[dict], notes: list[str]) -> tuple[str, list[dict]]:
    """The markdown report and the power records."""
    power_lines, records = power_table(rows)
    edges = floor_ceiling(rows) or ["no setting has every arm at the floor or the ceiling on eval/final"]
    text = [
        "## Spread and cost per arm",
        "",
        *arm_table(rows),
        "",
        "## Floor and ceiling",
        "",
        *(f"- {n}" for n in edges),
        "",
        "## Seeds per arm for the primary contrasts",
        "",
        *power_lines,
        *([""] + [f"- {n}" for n in notes] if notes else []),
    ]
    return "\n".join(text) + "\n", records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--experiment", default="gigpo-pilot")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    rows, notes = study_runs.read_runs(args.store, args.experiment)
    text, records = report(rows, notes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "per_seed.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "power.json").write_text(json.dumps(records, indent=1) + "\n")
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
