"""``gigpo-lab study <verb> SPEC``: plan, register, run, status and analyse a pre-registered study.

SPEC is a spec file, or the name of one the lab ships (``experiments/studies/<name>.yaml``). The verbs are
the registry ``VERBS``; each is its own module's ``main(args)``. A mistake in the spec or the arguments is a
one-line error that names the key and the fix.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from gigpo_lab.study.spec import SpecError

#: verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "plan": (
        "gigpo_lab.study.plan",
        "the grid, its CPU-hours and disk from measured runs, each contrast's power",
    ),
    "register": ("gigpo_lab.study.register_cmd", "write the registration beside the spec (or --amend it)"),
    "run": ("gigpo_lab.study.launch", "launch the grid's missing runs through the lab's multirun launcher"),
    "status": ("gigpo_lab.study.status", "finished, failed and missing runs per arm x setting, CPU-hours"),
    "analyse": (
        "gigpo_lab.study.analyse_cmd",
        "the families, Holm and the verdicts; analysis.json/.md, plots",
    ),
}


def source_args(parser: argparse.ArgumentParser) -> None:
    """The options that say where a study's rows are."""
    parser.add_argument("--out", type=Path, help="the study's folder (default: ./<study name>)")
    parser.add_argument("--store", help="an MLflow tracking URI or sqlite path to read runs from")
    parser.add_argument("--experiment", action="append", default=[],
                        help="MLflow experiment(s) in --store (default: the study's name); repeat")  # fmt: skip


def parser_for(verb: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"gigpo-lab study {verb}", description=VERBS[verb][1])
    parser.add_argument("spec", help="a spec file, or the name of one in the lab's experiments/studies/")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        lines = [f"  {v:<9} {h}" for v, (_, h) in VERBS.items()]
        sys.stdout.write("usage: gigpo-lab study <verb> SPEC [options]\n\nverbs:\n" + "\n".join(lines) + "\n")
        return 0
    if args[0] not in VERBS:
        sys.stderr.write(f"gigpo-lab study: unknown verb {args[0]!r}; valid verbs: {', '.join(VERBS)}\n")
        return 2
    module = importlib.import_module(VERBS[args[0]][0])
    try:
        return int(module.main(args[1:]) or 0)
    except (SpecError, ValueError) as e:  # a spec, an argument or a source that disagrees: one line
        sys.stderr.write(f"gigpo-lab study {args[0]}: {e}\n")
        return 2
