"""``gigpo-lab study status SPEC``: per cell (setting × arm), the runs finished (a run file), running and
failed (in the store, without a run file) and missing, with the CPU-hours spent (each finished run's
``cpu_s``, else its wall time × threads) and still to go (at ``study plan``'s price per run, ``plan.price``)."""

from __future__ import annotations

from pathlib import Path

from gigpo_lab.study.cli import parser_for
from gigpo_lab.study.launch import store_of
from gigpo_lab.study.plan import cell_rows, price, run_cost, threads
from gigpo_lab.study.rows import ARM_TAG, SETTING_TAG, STUDY_TAG, read_run_files
from gigpo_lab.study.spec import SpecError, load_spec


def store_states(uris: list[str], name: str) -> dict[tuple[str, str, int], str]:
    """``(setting, arm, seed)`` -> the status of its latest run over every store in ``uris`` (none when it is in
    none of them): a study run in several loops, each with its own store, reads as one."""
    from gigpo_lab.analysis.runs import experiment_records

    records = []
    for uri in uris:
        try:
            records += experiment_records(uri, name, f"tags.{STUDY_TAG} = '{name}'")
        except ValueError:  # no such experiment in this store yet
            continue
    states = {}
    for r in sorted(records, key=lambda r: r.start_time):
        states[(r.tags[SETTING_TAG], r.tags[ARM_TAG], int(r.tags["seed"]))] = r.status
    return states


def main(argv: list[str]) -> int:
    parser = parser_for("status")
    parser.add_argument("--out", type=Path, help="the study's folder (default: ./<study name>)")
    parser.add_argument("--store", action="append", default=[],
                        help="MLflow tracking URI or sqlite path, repeatable: one per loop that runs the study "
                             "(default: <out>/mlflow.db)")  # fmt: skip
    parser.add_argument("--pilot", action="store_true", help="the pilot seeds' grid")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec).spec
    out = args.out or Path.cwd() / spec.name
    done = (
        {(r["setting"], r["arm"], r["seed"]): r for r in read_run_files(out)}
        if (out / "runs").is_dir()
        else {}
    )
    db = out / "mlflow.db"
    missing = [store for store in args.store if "://" not in store and not Path(store).is_file()]
    if missing:  # a mistyped path would read as an empty store and show nothing in flight
        raise SpecError(
            f"--store {', '.join(missing)}: no such file; give the sqlite path each loop writes to"
        )
    uris = [store_of(out, store) for store in args.store] or ([store_of(out, None)] if db.is_file() else [])
    states = store_states(uris, spec.name)
    lines = ["| setting | arm | finished | running | failed | missing | CPU-h spent | CPU-h to go |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    spent_all = togo_all = 0.0
    for (setting, arm), seeds in spec.grid().items():
        seeds = spec.pilot_seeds.values if args.pilot else seeds
        mine = [done[(setting, arm, s)] for s in seeds if (setting, arm, s) in done]
        left = [s for s in seeds if (setting, arm, s) not in done]
        running = sum(states.get((setting, arm, s)) == "RUNNING" for s in left)
        failed = sum(states.get((setting, arm, s)) in ("FAILED", "KILLED") for s in left)
        n_threads = threads(spec, setting, arm)
        per_run = price(*cell_rows(spec, list(done.values()), setting, arm), n_threads)[0]
        spent = sum(run_cost(r, n_threads) or 0.0 for r in mine) / 3600
        togo = len(left) * per_run / 3600 if per_run is not None else float("nan")
        spent_all += spent
        togo_all += 0.0 if togo != togo else togo
        shown = "?" if togo != togo else f"{togo:.2f}"
        lines.append(f"| {setting} | {arm} | {len(mine)} | {running} | {failed} | {len(left) - running - failed} | "
                     f"{spent:.2f} | {shown} |")  # fmt: skip
    print("\n".join(lines))
    print(f"\nCPU-hours spent {spent_all:.2f}; to go {togo_all:.2f} (cells without a measured run: '?')")
    return 0
