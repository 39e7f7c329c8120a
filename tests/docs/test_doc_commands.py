"""Every shell command in README.md, docs/TUTORIAL.md and docs/GPU.md works as written, at least in a short form.

Each command of every ``bash`` block is checked without training:

* ``gigpo-lab train …`` and ``python -m gigpo_lab.cli train …``: the overrides compose (what ``--cfg job``
  checks), a multirun's comma lists cut to their first value, Hydra's flags dropped;
* ``gigpo-lab <other command> …``: the command exists, and every ``--flag`` it uses is in its ``--help``;
* ``make <target>``: the Makefile has the target;
* ``python -m <module> …``: the module can be found; ``python -c …``: the code compiles.

docs/TUTORIAL.md's blocks also run for real in tests/docs/test_tutorial.py; README's training commands run in
tests/cli/test_cli.py and tests/training/test_ddp.py (the CPU DDP smoke run through the console script).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest
from doc_blocks import blocks, commands

from gigpo_lab.cli import COMMANDS
from gigpo_lab.config_paths import compose_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/TUTORIAL.md", "docs/GPU.md")
#: Hydra's flags: what follows them is not an override.
HYDRA_FLAGS = {"-m", "--multirun", "--cfg", "-c", "--resolve", "--info", "-i", "--package", "-p"}


def _doc_commands() -> list[tuple[str, list[str]]]:
    """(``file:line``, argv without leading VAR=value assignments) of every command in a bash block."""
    out = []
    for name in DOCS:
        for block in blocks((ROOT / name).read_text()):
            if block.lang != "bash":
                continue
            for command in commands(block):
                for argv in _split(shlex.split(command, comments=True)):
                    while argv and re.match(r"^[A-Za-z_]\w*=", argv[0]):
                        argv.pop(0)
                    out.append((f"{name}:{block.line}", argv))
    return out


def _split(tokens: list[str]) -> list[list[str]]:
    """The commands of one shell line joined by ``&&``, ``||``, ``;`` or ``|``."""
    out = [[]]
    for token in tokens:
        if token in {"&&", "||", ";", "|"}:
            out.append([])
        else:
            out[-1].append(token)
    return [argv for argv in out if argv]


def _first_value(value: str) -> str:
    """The first value of a multirun sweep: ``0,1,2`` -> ``0``, ``range(10)`` -> ``0``, ``choice(a,b)`` -> ``a``."""
    function = re.fullmatch(r"(range|choice)\((.*)\)", value)
    if function:
        args = [a.strip() for a in function.group(2).split(",")]
        return ("0" if len(args) == 1 else args[0]) if function.group(1) == "range" else args[0]
    if "," in value and not value.startswith("["):
        return value.split(",")[0]
    return value


COMMANDS_IN_DOCS = _doc_commands()


def _train_overrides(argv: list[str]) -> list[str] | None:
    """The overrides of a training command (None if ``argv`` is not one)."""
    if argv[:2] == ["gigpo-lab", "train"]:
        rest = argv[2:]
    elif argv[:4] == ["python", "-m", "gigpo_lab.cli", "train"]:
        rest = argv[4:]
    else:
        return None
    overrides = []
    for i, token in enumerate(rest):
        if token in HYDRA_FLAGS or (i and rest[i - 1] in {"--cfg", "-c", "--package", "-p", "--info", "-i"}):
            continue
        key, _, value = token.partition("=")
        overrides.append(f"{key}={_first_value(value)}")  # a multirun's sweep: its first value
    return overrides


def test_the_docs_have_commands_of_every_kind():
    firsts = {tuple(argv[:2]) for _, argv in COMMANDS_IN_DOCS}
    assert (
        ("gigpo-lab", "train") in firsts and ("gigpo-lab", "compare") in firsts and ("make", "test") in firsts
    )
    assert len(COMMANDS_IN_DOCS) >= 30


@pytest.mark.parametrize(("where", "argv"), COMMANDS_IN_DOCS, ids=[w for w, _ in COMMANDS_IN_DOCS])
def test_every_documented_command_composes_or_exists(where, argv, capsys):
    overrides = _train_overrides(argv)
    if overrides is not None:
        if "estimator.step_advantge_weight=0.5" in overrides:  # the tutorial's deliberate typo
            with pytest.raises(Exception, match="step_advantge_weight"):
                compose_config(overrides)
            return
        compose_config(overrides, return_hydra_config=True)
    elif argv[0] == "gigpo-lab":
        assert argv[1] in COMMANDS, f"{where}: no command {argv[1]!r}"
        if argv[1] in ("train", "docs"):
            return
        from gigpo_lab.cli import main

        head = argv[1:3] if argv[1] == "study" else argv[1:2]  # `study` has verbs, each with its own flags
        with contextlib.redirect_stdout(io.StringIO()) as shown, pytest.raises(SystemExit):
            main([*head, "--help"])
        for flag in (t.split("=")[0] for t in argv[len(head) + 1 :] if t.startswith("--")):
            assert flag in shown.getvalue(), f"{where}: `gigpo-lab {' '.join(head)}` has no {flag}"
    elif argv[0] == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in (a for a in argv[1:] if "=" not in a):  # VAR=value: a make variable
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{where}: no make target {target}"
    elif argv[:2] == ["python", "-m"]:
        assert importlib.util.find_spec(argv[2]) is not None, f"{where}: no module {argv[2]}"
    elif argv[:2] == ["python", "-c"]:
        compile(argv[2], where, "exec")
    else:
        pytest.skip(f"{where}: {argv[0]} is not the lab's command")
