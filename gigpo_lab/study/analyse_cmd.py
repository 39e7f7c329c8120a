"""``gigpo-lab study analyse SPEC``: read the study's rows, analyse every family, write the report.

Rows come from the study's folder (``--out``: the run files its runs wrote), the store (``--store``, its
``--experiment`` s), earlier ``--rows`` files and a ``--prior`` analysis.json, in any combination
(``gigpo_lab.study.analyse.gather``). Writes analysis.json, analysis.md, rows.json, forest.png and
pairs-<family>.png to ``--report`` (default: ``<out>/report``).
"""

from __future__ import annotations

import json
from pathlib import Path

from gigpo_lab.study import registration, report
from gigpo_lab.study.analyse import analyse, gather
from gigpo_lab.study.cli import parser_for, source_args
from gigpo_lab.study.rows import save_rows
from gigpo_lab.study.spec import SpecError, load_spec


def main(argv: list[str]) -> int:
    parser = parser_for("analyse")
    source_args(parser)
    parser.add_argument("--rows", action="append", default=[], type=Path, help="an earlier rows.json; repeat")
    parser.add_argument("--prior", type=Path, help="an earlier analysis.json, for runs no other source holds")
    parser.add_argument("--report", type=Path, help="where to write the report (default: <out>/report)")
    parser.add_argument("--quiet", action="store_true", help="print only where the report went")
    args = parser.parse_args(argv)
    loaded = load_spec(args.spec)
    spec = loaded.spec
    registered = registration.check(loaded)
    out = args.out or Path.cwd() / spec.name
    if args.prior and not args.prior.is_file():
        raise SpecError(f"{args.prior}: no such file; give an existing analysis.json")
    if not ((out / "runs").is_dir() or args.store or args.rows or args.prior):
        raise SpecError(f"no rows: {out / 'runs'} does not exist; give --out, --store, --rows or --prior")
    rows, saved, prior, prior_json, notes = gather(
        spec, out=out, store=args.store, experiments=args.experiment, rows_files=args.rows,
        prior=json.loads(args.prior.read_text()) if args.prior else None,
    )  # fmt: skip
    result = analyse(spec, rows, prior, prior_json)
    folder = args.report or out / "report"
    folder.mkdir(parents=True, exist_ok=True)
    header = [f"# {spec.name}: analysis", "", spec.question, "", *registration.summary(registered)]
    text = report.markdown(spec, result, notes, header)
    (folder / "analysis.json").write_text(json.dumps(result, indent=1) + "\n")
    (folder / "analysis.md").write_text(text)
    save_rows(folder / "rows.json", saved)
    report.forest(spec, result, folder / "forest.png")
    for family in spec.families:
        report.pairs(spec, result, family.name, folder / f"pairs-{family.name}.png")
    print(f"report: {folder}" if args.quiet else text)
    return 0
