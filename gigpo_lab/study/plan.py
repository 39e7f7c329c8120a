"""``gigpo-lab study plan SPEC``: the grid, its cost from measured runs, and each contrast's power.

- **The grid**: runs per setting × arm (``Spec.grid``), confirmatory and pilot.
- **Cost**: per cell, the median CPU seconds per run: the ``cpu_s`` of the cell's measured runs (a run's process
  CPU time, which depends far less than its wall time on what else the machine runs), else of its setting's
  (any arm at the same torch threads); only where none has one, the median ``wall_s`` times the cell's torch
  threads (``lightning.num_threads`` in its overrides, else 1), of the cell's runs, else the setting's: an upper
  bound when they ran beside other jobs (``price``). Summed: CPU-hours. And the
  median ``disk_mb`` per run where rows carry it. Measured runs are every row the sources hold (a pilot, a
  short timing probe, earlier runs). A cell with no measured setting is listed as unmeasured.
- **Power**, from pilot data (rows on the pilot seeds): per contrast of a confirmatory family on its metric,
  the sd of the pilot's paired differences, the seeds the paired t-test needs for power 0.8 at δ with α
  split over the family (Holm's first step, ``analysis.power.planning_alpha``), the power at the planned
  seeds, and the smallest effect those seeds detect with power 0.8 (what the spec registers as the family's δ
  where the budget does not buy the seeds that δ needs). The pilot's mean difference is never shown: it is
  not a result.

``--pilot`` first runs the grid on the pilot seeds (``gigpo-lab study run --pilot``), then plans from them.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from gigpo_lab.analysis.power import detectable_effect, paired_power, planning_alpha, seeds_for
from gigpo_lab.study import rows as study_rows
from gigpo_lab.study.analyse import side_values
from gigpo_lab.study.cli import parser_for, source_args
from gigpo_lab.study.spec import Spec, load_spec

POWER = 0.8


def threads(spec: Spec, setting: str, arm: str) -> int:
    """The torch threads a cell's runs use: the last ``lightning.num_threads=`` of its overrides, else 1."""
    found = [o.split("=", 1)[1] for o in (*spec.overrides, *spec.settings[setting], *spec.arms[arm])
             if o.lstrip("+").startswith("lightning.num_threads=")]  # fmt: skip
    return int(found[-1]) if found else 1


def run_cost(row: dict, n_threads: int) -> float | None:
    """A finished run's CPU seconds: its ``cpu_s``, else its ``wall_s`` times ``n_threads``, else None."""
    if row.get("cpu_s") is not None:
        return row["cpu_s"]
    return None if row.get("wall_s") is None else row["wall_s"] * n_threads


def cell_rows(spec: Spec, measured: list[dict], setting: str, arm: str) -> tuple[list[dict], list[dict]]:
    """The measured runs of a cell, and those of its setting at the cell's torch threads (any arm)."""
    n = threads(spec, setting, arm)
    own = [r for r in measured if (r["setting"], r["arm"]) == (setting, arm)]
    near = [r for r in measured if r["setting"] == setting and r["arm"] in spec.arms
            and threads(spec, setting, r["arm"]) == n]  # fmt: skip
    return own, near


def price(own: list[dict], near: list[dict], n_threads: int) -> tuple[float | None, str]:
    """A cell's CPU seconds per run (module doc) and where they come from: the median ``cpu_s`` of ``own`` (the
    cell's runs), else of ``near`` (its setting's at the same threads); where neither has one, the median
    ``wall_s`` × ``n_threads`` likewise. (None, "-") when nothing was measured."""
    for timed in (True, False):
        for rows, what in ((own, "the cell's"), (near, "the setting's")):
            key = "cpu_s" if timed else "wall_s"
            values = [r[key] * (1 if timed else n_threads) for r in rows if r.get(key) is not None]
            if values:
                how = "cpu_s" if timed else "wall × threads"
                return statistics.median(values), f"{what} {len(values)} runs, {how}"
    return None, "-"


def cost(spec: Spec, measured: list[dict], seeds: str = "confirmatory") -> tuple[list[dict], list[str]]:
    """Per cell: runs, the CPU seconds per run it is planned at (``price``), and where that came from; and
    the lines of the cost table with its totals."""

    def median(values: list[float | None]) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    cells, lines = [], ["| setting | arm | runs | threads | CPU s / run | from | disk MB / run |",
                        "|---|---|---|---|---|---|---|"]  # fmt: skip
    for (setting, arm), planned in spec.grid().items():
        runs = len(planned) if seeds == "confirmatory" else len(spec.pilot_seeds.values)
        own, near = cell_rows(spec, measured, setting, arm)
        n_threads = threads(spec, setting, arm)
        cpu, source = price(own, near, n_threads)
        disk = median([r.get("disk_mb") for r in own]) or median([r.get("disk_mb") for r in near])
        cells.append({"setting": setting, "arm": arm, "runs": runs, "threads": n_threads, "cpu_s": cpu,
                      "disk_mb": disk})  # fmt: skip
        shown = "unmeasured" if cpu is None else f"{cpu:.0f}"
        lines.append(f"| {setting} | {arm} | {runs} | {n_threads} | {shown} | "
                     f"{source} | {'-' if disk is None else f'{disk:.1f}'} |")  # fmt: skip
    measured_cells = [c for c in cells if c["cpu_s"] is not None]
    cpu_h = sum(c["runs"] * c["cpu_s"] for c in measured_cells) / 3600
    missing = sum(c["runs"] for c in cells if c["cpu_s"] is None)
    disk_cells = [c for c in cells if c["disk_mb"] is not None]
    disk_gb = sum(c["runs"] * c["disk_mb"] for c in disk_cells) / 1000
    total = [f"Runs: {sum(c['runs'] for c in cells)} in {len(cells)} cells. CPU-hours: {cpu_h:.1f} for the "
             f"{sum(c['runs'] for c in measured_cells)} runs of measured settings"
             + (f", plus {missing} runs unmeasured" if missing else "") + "."]  # fmt: skip
    total.append(f"Disk: {disk_gb:.1f} GB for the {sum(c['runs'] for c in disk_cells)} runs of measured cells."
                 if disk_cells else "Disk: unmeasured (no row carries disk_mb).")  # fmt: skip
    for limit, have, unit in (
        (spec.budget.cpu_hours, cpu_h, "CPU-hours"),
        (spec.budget.disk_gb, disk_gb, "GB"),
    ):
        if limit is not None:
            total.append(
                f"Budget: {limit} {unit}; {'within' if have <= limit else '**over**'} at the measured rate."
            )
    return cells, lines + [""] + total


def power(spec: Spec, pilot: list[dict]) -> list[str]:
    """The power table from the pilot rows (module docstring); empty without pilot pairs."""
    lines = []
    for family in (f for f in spec.families if f.confirmatory):
        metric = spec.family_metric(family)
        contrasts = family.expanded()
        alpha = planning_alpha(spec.alpha, len(contrasts))
        planned = len(spec.family_seeds(family))
        delta = spec.family_delta(family)
        body = []
        for label, setting, a, b in contrasts:
            va, vb = (side_values(pilot, setting, side, metric) for side in (a, b))
            d = np.array([va[s] - vb[s] for s in sorted(set(va) & set(vb))])
            if len(d) < 2:
                body.append(f"| {label} | {len(d)} | - | - | - | - |")
                continue
            sd = float(np.std(d, ddof=1))
            need = seeds_for(delta, sd, alpha) if sd > 0 else 2
            have = paired_power(planned, delta, sd, alpha) if sd > 0 else 1.0
            smallest = f"{detectable_effect(planned, sd, alpha, POWER):.3f}" if sd > 0 else "-"
            body.append(
                f"| {label} | {len(d)} | {sd:.3f} | {need if need is not None else '> max'} | {have:.2f} "
                f"| {smallest} |"
            )
        lines += [f"Family {family.name} on {metric}: {len(contrasts)} contrasts, each planned at α = {spec.alpha} / "
                  f"{len(contrasts)} = {alpha:.4f}, power {POWER}, δ = {delta}, paired t-test on the pilot's sd.",
                  "", f"| contrast | pilot pairs | sd of differences | seeds for power {POWER} | power at {planned} "
                  f"| δ detected at {planned} |", "|---|---|---|---|---|---|", *body, ""]  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    parser = parser_for("plan")
    source_args(parser)
    parser.add_argument("--rows", action="append", default=[], type=Path,
                        help="rows of measured runs (a pilot's, a probe's); repeat")  # fmt: skip
    parser.add_argument("--pilot", action="store_true", help="run the pilot seeds first, then plan from them")
    args = parser.parse_args(argv)
    loaded = load_spec(args.spec)
    spec = loaded.spec
    out = args.out or Path.cwd() / spec.name
    if args.pilot:
        from gigpo_lab.study import launch

        code = launch.main(
            [args.spec, "--pilot", "--out", str(out), *(["--store", args.store] if args.store else [])]
        )
        if code:
            return code
    measured, _ = study_rows.read_sources(
        spec, out=out, store=args.store, experiments=args.experiment, rows_files=args.rows
    )
    grid = spec.grid()
    print(f"# {spec.name}: plan\n\n{spec.question}\n")
    print(f"Confirmatory seeds {spec.confirmatory_seeds_text()}; pilot seeds "
          f"{spec.pilot_seeds.start}-{spec.pilot_seeds.stop - 1}; {len(grid)} cells; "
          f"{len(measured)} measured runs.\n")  # fmt: skip
    for title, which in (("Confirmatory grid", "confirmatory"), ("Pilot grid", "pilot")):
        print(f"## {title}\n")
        print("\n".join(cost(spec, measured, which)[1]) + "\n")
    pilot = [r for r in measured if r["seed"] in set(spec.pilot_seeds.values)]
    table = power(spec, pilot)
    print("## Power from the pilot\n")
    print(
        "\n".join(table)
        if pilot
        else "No pilot rows: run `gigpo-lab study plan SPEC --pilot`, or give --rows."
    )
    return 0
