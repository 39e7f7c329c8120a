"""``gigpo-lab study run SPEC``: launch the grid's missing runs; the same command resumes.

Per cell (setting × arm) whose seeds lack a run file (``<out>/runs/<setting>/<arm>/seed_<n>.json``), one
``gigpo-lab train -m`` multirun through the lab's own launchers (the spec's ``overrides`` choose one:
``hydra/launcher=local`` joblib, or a SLURM one), over those seeds, with ``resume=true`` (a killed sweep's
FINISHED jobs are skipped). Each run is tagged ``study``, ``study_setting``, ``study_arm``,
``study_spec_hash`` (and ``seed``), and writes its metrics row to its run file as it finishes, so a lost store
loses no result. Study runs are **light** by default: last.ckpt alone (still rewritten every
``trainer.checkpoint_every`` iterations, so a failed run leaves one), without the frozen base weights (an LLM's
checkpoint holds its adapters; a resume rebuilds the base: ``gigpo_lab/policy/frozen_base.py``), and no
checkpoint artifact in MLflow (``--keep-checkpoints`` keeps them all, whole); these switches are not part of a
job's identity (``tracking.sweep_resume.NOT_IDENTITY``), so resume finds the runs either way.

A run's folder is ``<out>/outputs/<setting>/<arm>/seed_<n>``, so no two sweeps of a cell (a resume, another
``--seed``) write to one folder.

``--setting`` and ``--arm`` (each repeatable) keep only those cells, and ``--seed`` (repeatable) only those seeds
of them: a loop over ``--seed`` finishes a setting's pairs a seed at a time, where one command finishes a cell
(every seed of one arm) before the next arm starts. Two commands on disjoint cells or seeds can run at once,
with a store each (``--store``; the run files are the record either way). Each launches its jobs through the
spec's launcher, which may already use every core (``hydra/launcher=local``), so together they share the cores
and the memory: a SmolLM2 run peaks near 7 GB resident, and four at once were OOM-killed on a 24 GiB machine.

A confirmatory run needs a registered, unchanged spec (``registration.check``); ``--pilot`` runs the pilot
seeds, registered or not. The store defaults to ``sqlite:///<out>/mlflow.db``, inside the study's folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gigpo_lab.study import registration
from gigpo_lab.study.cli import parser_for
from gigpo_lab.study.rows import ARM_TAG, HASH_TAG, SETTING_TAG, STUDY_TAG, run_file
from gigpo_lab.study.spec import LoadedSpec, SpecError, load_spec


def chosen(names: list[str] | None, valid: list[str], flag: str) -> set[str]:
    """The names given with ``flag`` (all of ``valid`` when none was), each checked against ``valid``."""
    if unknown := [n for n in names or [] if n not in valid]:
        raise SpecError(f"{flag} {', '.join(unknown)}: not in the spec; choose from {', '.join(valid)}")
    return set(names or valid)


def missing(
    loaded: LoadedSpec,
    out: Path,
    pilot: bool,
    settings: list[str] | None = None,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
) -> dict[tuple[str, str], list[int]]:
    """Per cell (of ``settings`` × ``arms``; None: every one), the seeds of this grid (confirmatory or pilot),
    of ``seeds`` only if given, that have no run file yet."""
    spec = loaded.spec
    keep = chosen(settings, list(spec.settings), "--setting"), chosen(arms, list(spec.arms), "--arm")
    cells = {
        cell: (spec.pilot_seeds.values if pilot else seeds)
        for cell, seeds in spec.grid().items()
        if cell[0] in keep[0] and cell[1] in keep[1]
    }
    if not cells:
        grid = ", ".join(f"{s}/{a}" for s, a in spec.grid())
        raise SpecError(f"--setting/--arm: no cell of the grid is both; its cells: {grid}")
    if seeds is not None:
        grid_seeds = sorted({s for cell_seeds in cells.values() for s in cell_seeds})
        if unknown := [s for s in seeds if s not in grid_seeds]:
            raise SpecError(f"--seed {', '.join(map(str, unknown))}: not a {'pilot' if pilot else 'confirmatory'} "
                            f"seed of these cells; choose from {_ranges(grid_seeds)}")  # fmt: skip
        cells = {cell: [s for s in cell_seeds if s in seeds] for cell, cell_seeds in cells.items()}
    return {cell: todo for cell, cell_seeds in cells.items()
            if (todo := [s for s in cell_seeds if not run_file(out, *cell, s).is_file()])}  # fmt: skip


def _ranges(values: list[int]) -> str:
    """Sorted ints as runs: ``[1, 2, 3, 7]`` -> ``1–3, 7``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def store_of(out: Path, store: str | None) -> str:
    from gigpo_lab.analysis.runs import store_uri

    return store_uri(store) if store else f"sqlite:///{(out / 'mlflow.db').resolve()}"


def command(loaded: LoadedSpec, setting: str, arm: str, seeds: list[int], out: Path, store: str,
            light: bool = True) -> list[str]:  # fmt: skip
    """The ``gigpo-lab train -m`` command of one cell."""
    spec = loaded.spec
    if "'" in str(out):
        raise SpecError(f"--out {out}: a quote in the path; choose a folder without one")
    rows = out.resolve() / "runs" / setting / arm
    tags = {STUDY_TAG: spec.name, SETTING_TAG: setting, ARM_TAG: arm, HASH_TAG: loaded.hash}
    return [
        sys.executable, "-m", "gigpo_lab.cli", "train", "-m",
        # light runs first, so that a spec's own overrides (a setting or arm that needs whole checkpoints) win
        f"trainer.keep_checkpoints={str(not light).lower()}", f"tracking.log_checkpoint={str(not light).lower()}",
        f"trainer.checkpoint_frozen_base={str(not light).lower()}",
        *spec.overrides, *spec.settings[setting], *spec.arms[arm],
        "seed=" + ",".join(map(str, seeds)),
        f"tracking.uri={store}", f"tracking.experiment={spec.name}",
        *(f"+tracking.tags.{k}={v}" for k, v in tags.items()),
        f"tracking.row_file='{rows}/seed_${{seed}}.json'",
        f"hydra.sweep.dir='{out.resolve()}/outputs/{setting}/{arm}'",
        # a folder per seed, not per job number: sweeps over other seeds (a resume, --seed) never share one
        "hydra.sweep.subdir='seed_${seed}'",
        "resume=true",
    ]  # fmt: skip


def main(argv: list[str]) -> int:
    parser = parser_for("run")
    parser.add_argument("--out", type=Path, help="the study's folder (default: ./<study name>)")
    parser.add_argument("--store", help="MLflow tracking URI or sqlite path (default: <out>/mlflow.db)")
    parser.add_argument(
        "--pilot", action="store_true", help="run the pilot seeds instead of the confirmatory ones"
    )
    parser.add_argument("--setting", action="append", help="run only this setting's cells (repeatable)")
    parser.add_argument("--arm", action="append", help="run only this arm's cells (repeatable)")
    parser.add_argument("--seed", action="append", type=int, help="run only this seed (repeatable)")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep every periodic checkpoint")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    loaded = load_spec(args.spec)
    registered = registration.check(loaded)
    if registered is None and not args.pilot:
        raise SpecError(f"{loaded.path}: not registered; run `gigpo-lab study register {args.spec}` and commit "
                        "the registration before confirmatory runs (or give --pilot)")  # fmt: skip
    out = args.out or Path.cwd() / loaded.spec.name
    todo = missing(loaded, out, args.pilot, args.setting, args.arm, args.seed)
    store = store_of(out, args.store)
    total = sum(map(len, todo.values()))
    print(f"{loaded.spec.name}: {total} runs to go in {len(todo)} cells ({'pilot' if args.pilot else 'confirmatory'})"
          f"; rows in {out / 'runs'}, store {store}")  # fmt: skip
    failed = []
    for (setting, arm), seeds in todo.items():
        cmd = command(loaded, setting, arm, seeds, out, store, light=not args.keep_checkpoints)
        print(f"- {setting} / {arm}: seeds {','.join(map(str, seeds))}", flush=True)
        if args.dry_run:
            print("  " + " ".join(cmd[2:]))
            continue
        if subprocess.run(cmd).returncode:
            failed.append(f"{setting}/{arm}")
    left = (
        sum(map(len, missing(loaded, out, args.pilot, args.setting, args.arm, args.seed).values()))
        if not args.dry_run
        else total
    )
    if failed or left:
        print(
            f"{left} runs still missing (failed cells: {', '.join(failed) or 'none'}); the same command resumes"
        )
        return 1 if failed else 0
    print(
        "every run of the grid finished"
        if not (args.setting or args.arm or args.seed)
        else "every run of these cells finished"
    )
    return 0
