"""``gigpo-lab study register SPEC``: write the registration beside the spec, or ``--amend`` it.

An amendment needs ``--reason`` and ``--seen-confirmatory yes|no``; the tool counts the confirmatory rows that
exist (run files in ``--out``, runs in ``--store``) and records them. Also writes the human-readable
registration ``<spec>.md`` beside the spec, generated from it (``registration_text``)."""

from __future__ import annotations

from pathlib import Path

from gigpo_lab.study import registration
from gigpo_lab.study.cli import parser_for
from gigpo_lab.study.registration_text import write_text
from gigpo_lab.study.rows import merge, read_run_files, read_store
from gigpo_lab.study.spec import SpecError, load_spec


def main(argv: list[str]) -> int:
    parser = parser_for("register")
    parser.add_argument("--amend", action="store_true", help="record a change to a registered spec")
    parser.add_argument("--reason", default="", help="why the spec changed (with --amend)")
    parser.add_argument("--seen-confirmatory", choices=("yes", "no"),
                        help="had any confirmatory result been seen? (with --amend)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="the study's folder, to count its rows (default: ./<name>)")
    parser.add_argument("--store", help="an MLflow store whose runs of the study to count too")
    args = parser.parse_args(argv)
    loaded = load_spec(args.spec)
    if not args.amend:
        path = registration.register(loaded)
        print(f"registered {loaded.spec.name} (spec {loaded.hash}): {path}; commit it with the spec")
    else:
        if args.seen_confirmatory is None:
            raise SpecError(
                "--seen-confirmatory: missing; say yes or no: had any confirmatory result been seen?"
            )
        out = args.out or Path.cwd() / loaded.spec.name
        read = [read_run_files(out)] if (out / "runs").is_dir() else []
        if args.store:
            from gigpo_lab.analysis.runs import store_uri

            read.append(read_store(store_uri(args.store), loaded.spec.name, loaded.spec)[0])
        rows, _ = merge(*read)
        confirmatory = set(loaded.spec.seeds.values)
        count = sum(r["seed"] in confirmatory for r in rows)
        path = registration.amend(loaded, args.reason, args.seen_confirmatory == "yes", count)
        print(f"amended {loaded.spec.name} (spec {loaded.hash}, {count} confirmatory rows then): {path}")
    print(f"registration text: {write_text(loaded)}")
    return 0
