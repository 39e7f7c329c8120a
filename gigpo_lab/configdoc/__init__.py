"""``gigpo-lab docs``: write ``docs/CONFIG.md``, the parameter reference, from the configs themselves.

Nothing in CONFIG.md is written by hand. For every config group (``config_paths.config_groups``, plus
``experiments/`` and ``sweeps/``), every option and every key, it gives:

- **type**: from the typed schema (the composed config's typed nodes);
- **default**: the option's value as Hydra composes it (``compose_config``), unresolved;
- **allowed**: the schema's Enum values (built from the constants the constructors check);
- **meaning**: the schema field's ``#:`` comment: each key is documented once, in its schema (the run-level
  keys in ``config_paths.RunKeys``). YAML comments are never read, but for a file's leading comment block,
  its description.

New groups, options and keys appear without any change here. ``gigpo-lab docs --check`` exits 1 when the
committed file differs from what is generated (the test suite runs it). Modules: ``collect`` (what each key
is), ``render`` (the Markdown).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from gigpo_lab.config_paths import config_root


def default_output() -> Path | None:
    """``docs/CONFIG.md`` of the source checkout, or None in an installed wheel (which has no docs/)."""
    root = config_root()
    return root / "docs" / "CONFIG.md" if (root / "pyproject.toml").is_file() else None


def generate() -> str:
    """The text of CONFIG.md for the current configs."""
    from gigpo_lab.configdoc.collect import collect
    from gigpo_lab.configdoc.render import render

    return render(collect())


def main(argv: list[str] | None = None) -> int:
    """``gigpo-lab docs [--check] [--out PATH]``."""
    parser = argparse.ArgumentParser(
        prog="gigpo-lab docs",
        description="Generate docs/CONFIG.md, the parameter reference, from conf/, experiments/, sweeps/ "
        "and the typed schemas.",
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if the file differs from the configs"
    )
    parser.add_argument("--out", help="output file; '-' for stdout (default: docs/CONFIG.md of the checkout)")
    args = parser.parse_args(argv)
    text = generate()
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.out) if args.out else default_output()
    if out is None:
        sys.stderr.write(
            "gigpo-lab docs: not in a source checkout; pass --out PATH (or --out - for stdout)\n"
        )
        return 2
    if args.check:
        old = out.read_text() if out.is_file() else ""
        if old == text:
            sys.stdout.write(f"{out} is up to date\n")
            return 0
        diff = list(
            difflib.unified_diff(old.splitlines(), text.splitlines(), str(out), "generated", lineterm="")
        )
        more = f"\n… ({len(diff) - 60} more diff lines)" if len(diff) > 60 else ""
        sys.stderr.write(
            f"{out} is out of date with the configs: run `gigpo-lab docs` and commit the result.\n"
            + "\n".join(diff[:60])
            + more
            + "\n"
        )
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    sys.stdout.write(f"wrote {out}\n")
    return 0
