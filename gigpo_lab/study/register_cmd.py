"""``gigpo-lab study register SPEC``: write the registration beside the spec, or ``--amend`` it.

An amendment needs ``--reason`` and ``--seen-confirmatory yes|no``; the tool counts the confirmatory rows that
exist (run files in ``--out``, runs in ``--store``) and records them. Also writes the human-readable
registration ``<spec>.md`` beside the spec, generated from it (``registration_text``)."""

from __future__ import annotations

from pathlib import Path

from gigpo_lab.study import registration
from gigpo_lab.study.cli import parser_for, source_args
from gigpo_lab.study.registration_text import write_text
from gigpo_lab.study.rows import read_sources
from gigpo_lab.study.spec import SpecError, load_spec


def main(argv: list[str]) -> int:
    parser = parser_for("register")
    parser.add_argument("--amend", action="store_true", help="record a change to a registered spec")
    parser.add_argument("--reason", default="", help="why the spec changed (with --amend)")
    parser.add_argument("--seen-confirmatory", choices=("yes", "no"),
                        help="had any confirmatory result been seen? (with --amend)")  # fmt: skip
    source_args(parser)  # where the rows an amendment counts are
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
        rows, _ = read_sources(loaded.spec, out=out, store=args.store, experiments=args.experiment)
        confirmatory = set(loaded.spec.seeds.values)
        count = sum(r["seed"] in confirmatory for r in rows)
        path = registration.amend(loaded, args.reason, args.seen_confirmatory == "yes", count)
        print(f"amended {loaded.spec.name} (spec {loaded.hash}, {count} confirmatory rows then): {path}")
    print(f"registration text: {write_text(loaded)}")
    return 0
