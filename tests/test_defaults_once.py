"""Every default is written once (issue #63): no parameter of a lab function carries a literal default that a
config schema field of the same name also writes as a literal. Where a schema field and a function share a
name, one reads the other (``choices.default_of``, or the function naming the schema's field)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import gigpo_lab
from gigpo_lab.config_paths import all_schemas

PACKAGE = Path(gigpo_lab.__file__).parent
#: (file, function, parameter) pairs that share a name with a schema field but not its meaning, with why.
UNRELATED = {
    ("analysis/plots.py", "_figure", "width"): "a figure's size in inches, not Sokoban's board",
    ("analysis/plots.py", "_figure", "height"): "a figure's size in inches, not Sokoban's board",
    (
        "packing/microbatch.py",
        "chunked_logprobs",
        "shared_prefix",
    ): "the resolved switch (trainer's None = auto)",
    (
        "packing/microbatch.py",
        "microbatched_loss",
        "shared_prefix",
    ): "the resolved switch (trainer's None = auto)",
}


def _literal(node: ast.expr | None) -> bool:
    """Whether ``node`` is a literal scalar other than None (``-0.1`` included), or ``param(<literal>, ...)``
    (a bounded field, ``gigpo_lab.algorithm.settings.param``)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "param" and node.args:
        node = node.args[0]
    try:
        value = ast.literal_eval(node) if node is not None else None
    except ValueError:
        return False
    return value is not None and isinstance(value, int | float | str | bool)


def literal_fields() -> dict[str, list[str]]:
    """Schema field name -> the schemas that give it a literal default."""
    out: dict[str, list[str]] = {}
    for cls in {
        c for schema in all_schemas().values() for c in schema.__mro__ if dataclasses.is_dataclass(c)
    }:
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
        for item in body:
            if isinstance(item, ast.AnnAssign) and _literal(item.value):
                out.setdefault(item.target.id, []).append(cls.__name__)
    return out


def literal_parameters() -> list[tuple[str, str, str]]:
    """(file, function, parameter) of every parameter of the package given a literal default (not None)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = [
                *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False),
                *zip(a.kwonlyargs, a.kw_defaults, strict=False),
            ]
            for arg, default in pairs:
                if _literal(default):
                    found.append((str(path.relative_to(PACKAGE)), node.name, arg.arg))
    return found


def test_no_default_is_written_in_a_schema_and_in_a_function():
    fields = literal_fields()
    twice = [
        (f, fn, p, fields[p])
        for f, fn, p in literal_parameters()
        if p in fields and (f, fn, p) not in UNRELATED
    ]
    assert twice == [], "read the default from one place (choices.default_of, or the schema's field)"


def test_the_finder_sees_a_default_written_twice(tmp_path, monkeypatch):
    fields = literal_fields()
    assert (
        "eval_episodes" in fields and "size" not in fields
    )  # the rollout schema writes it; FrozenLake reads it
    (tmp_path / "fake.py").write_text(
        "def f(eval_episodes=16, seed=None, *, step_reward=-0.1, x=max):\n    pass\n"
    )
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    assert literal_parameters() == [("fake.py", "f", "eval_episodes"), ("fake.py", "f", "step_reward")]
