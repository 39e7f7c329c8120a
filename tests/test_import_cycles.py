"""No import cycles in the package, inside folders or between them (issue #63): every import of a
``gigpo_lab`` module, at the top of a file or inside a function, is an arrow, and the arrows have no loop. An
import inside a function only defers a cycle to run time; the shared names belong in a module both sides
import."""

from __future__ import annotations

import ast
from pathlib import Path

import gigpo_lab

PACKAGE = Path(gigpo_lab.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere (``from a.b import c`` counts ``a.b.c`` when that
    is a module, else ``a.b``); the package faces (``__init__``) are left out, as ``farm-studio`` draws them."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                for a in node.names
            ]
        else:
            continue
        found.update(n for n in names if n in known)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    files = {_module(p): p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    graph = {m: _imports(p, set(files)) - {m} for m, p in files.items()}
    assert _cycles(graph) == []


def test_the_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
