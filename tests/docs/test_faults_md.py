"""docs/FAULTS.md stays true: every test it names exists, and every fault, bad-input, determinism and
security test is named in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "FAULTS.md"
#: The test files whose every test must appear in the document.
LISTED = (
    "tracking/test_faults*.py",
    "envs/test_textworld_cache.py",
    "cli/test_run_info.py",
    "training/test_determinism.py",
    "tracking/test_security.py",
)
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[([^\]`]+)\])?`")


def _table_ids() -> list[tuple[str, str, str | None]]:
    ids = []
    for line in DOC.read_text().splitlines():
        if line.startswith("|"):
            ids += TEST_ID.findall(line)
    return [(path, name, param or None) for path, name, param in ids]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_the_tables_name_tests():
    assert len(_table_ids()) > 40


@pytest.mark.parametrize(("path", "name", "param"), _table_ids(), ids=lambda v: str(v))
def test_every_named_test_exists(path, name, param):
    file = ROOT / path
    assert file.is_file(), f"{path} does not exist"
    assert name in _test_functions(file), f"{path} has no {name}"
    if (
        param is not None
    ):  # a parametrized case: its id is written in the file (as an override or a case name)
        assert param in file.read_text(), f"{path}::{name} has no case {param}"


def test_every_fault_test_is_in_the_document():
    named = {(path, name) for path, name, _ in _table_ids()}
    missing = [
        f"{file.relative_to(ROOT).as_posix()}::{name}"
        for pattern in LISTED
        for file in sorted((ROOT / "tests").glob(pattern))
        for name in sorted(_test_functions(file))
        if (file.relative_to(ROOT).as_posix(), name) not in named
    ]
    assert not missing, f"add these to docs/FAULTS.md: {missing}"
