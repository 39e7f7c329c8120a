"""The comments of a YAML file, attached to the keys they describe (PyYAML positions, no ruamel).

The lab's configs use two comment styles, often in one file::

    # Turns per episode, valid and invalid alike.        <- comment lines directly above a key
    max_turns: 20
    gamma: 0.95   # discount of the step return           <- an inline comment after the value

``parse`` composes the file with PyYAML (``yaml.compose``: the node tree with the line and column of every
key and value), then reads each key's comments from the raw lines at those positions: the block of comment
lines directly above the key (no blank line between), and the text after ``#`` on the line where the value
ends (on the key's own line for a block mapping or list). Both are joined into one line. The file's
leading comment block is its *header* (the description of the whole file), never a key's comment; the
``# @package`` directive is dropped from it. Defaults-list entries (``- gigpo_schema  # ...``) are keys too.

Paths are tuples of mapping keys (str) and list indices (int): ``("optimizer", "lr")``,
``("defaults", 0)``, ``("strategy", "auto_wrap_policy", "module_classes", 1, "path")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

Key = tuple[str | int, ...]


@dataclass
class Entry:
    """One key (or list item) of a YAML file.

    Attributes:
        path: where it is (see the module docstring).
        line: its 0-based line in the file.
        comment: the comment lines above and the inline comment, joined; "" when it has none.
        value: the plain Python value (``yaml.safe_load`` semantics) of what it holds.
        container: True when it holds a mapping (its own keys are entries too).
    """

    path: Key
    line: int
    comment: str
    value: object
    container: bool


@dataclass
class CommentedYaml:
    """A parsed file: its header, its ``# @package`` directive (or None) and its entries in file order."""

    header: str
    package: str | None
    entries: list[Entry] = field(default_factory=list)

    def comments(self) -> dict[Key, str]:
        return {e.path: e.comment for e in self.entries}


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _comment_text(line: str) -> str:
    return line.lstrip()[1:].strip()


def _header(lines: list[str]) -> tuple[str, str | None, int]:
    """The leading comment block (without ``# @package``), the package, and the first line after the block."""
    parts, package, end = [], None, 0
    while end < len(lines) and _is_comment(lines[end]):
        text = _comment_text(lines[end])
        if text.startswith("@package"):
            package = text.split(None, 1)[1].strip() if " " in text else ""
        else:
            parts.append(text)
        end += 1
    return " ".join(p for p in parts if p), package, end


def _above(lines: list[str], line: int, header_end: int) -> str:
    """The comment lines directly above ``line`` (outside the header), joined."""
    first = line
    while first > 0 and _is_comment(lines[first - 1]):
        first -= 1
    if first < header_end or first == line:
        return ""
    return " ".join(_comment_text(x) for x in lines[first:line])


def _inline(lines: list[str], line: int, column: int) -> str:
    """The text after ``#`` on ``line`` from ``column`` on (a key's ':' may come first)."""
    rest = lines[line][column:].lstrip()
    if rest.startswith(":"):
        rest = rest[1:].lstrip()
    return rest[1:].strip() if rest.startswith("#") else ""


def _inline_after(lines: list[str], key_end: yaml.Mark, value: yaml.Node) -> str:
    """The inline comment of a key (or list item) holding ``value``."""
    if isinstance(value, yaml.ScalarNode) and value.style in ("|", ">"):
        return _inline(lines, value.start_mark.line, value.start_mark.column + 1)
    block = isinstance(value, yaml.MappingNode | yaml.SequenceNode) and not value.flow_style
    empty = isinstance(value, yaml.ScalarNode) and value.value == "" and value.style is None  # `key:` = null
    if block or empty:
        return _inline(lines, key_end.line, key_end.column)
    return _inline(lines, value.end_mark.line, value.end_mark.column)


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def parse(text: str) -> CommentedYaml:
    """Parse YAML ``text`` into its header and commented entries (see the module docstring)."""
    lines = text.splitlines()
    header, package, header_end = _header(lines)
    out = CommentedYaml(header, package)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    constructor = yaml.SafeLoader("")

    def value_of(node: yaml.Node) -> object:
        return constructor.construct_object(node, deep=True)

    def walk(node: yaml.Node, path: Key) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, key.value)
                comment = _join(
                    _above(lines, key.start_mark.line, header_end), _inline_after(lines, key.end_mark, value)
                )
                out.entries.append(
                    Entry(
                        here,
                        key.start_mark.line,
                        comment,
                        value_of(value),
                        isinstance(value, yaml.MappingNode),
                    )
                )
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode) and not node.flow_style:
            for i, item in enumerate(node.value):
                here = (*path, i)
                if isinstance(item, yaml.MappingNode) and len(item.value) == 1 and path == ("defaults",):
                    # a defaults entry such as `- override /env: frozenlake  # why`: one key, one entry
                    key, value = item.value[0]
                    comment = _join(
                        _above(lines, item.start_mark.line, header_end),
                        _inline_after(lines, key.end_mark, value),
                    )
                    out.entries.append(Entry(here, item.start_mark.line, comment, value_of(item), False))
                elif isinstance(item, yaml.MappingNode):
                    walk(item, here)
                else:
                    comment = _join(
                        _above(lines, item.start_mark.line, header_end), _inline(lines, *_end(item))
                    )
                    out.entries.append(Entry(here, item.start_mark.line, comment, value_of(item), False))

    def _end(node: yaml.Node) -> tuple[int, int]:
        return node.end_mark.line, node.end_mark.column

    if root is not None:
        walk(root, ())
    return out


def parse_file(path: Path) -> CommentedYaml:
    return parse(Path(path).read_text())


def missing_comments(parsed: CommentedYaml, *, root_config: bool = False) -> list[Key]:
    """The paths of keys without a comment, under the house rule "every key says what it is".

    Exempt: the ``defaults`` key itself and its ``_self_`` entry (Hydra structure), the items of a plain list
    (the list's key carries the comment), and, in the root config and in ``# @package _global_`` files,
    keys whose value is a mapping: there they only open a path into the config (``hydra:``, ``trainer:``).
    """
    path_only = root_config or parsed.package == "_global_"
    missing = []
    for e in parsed.entries:
        if e.path == ("defaults",) or e.comment:
            continue
        if e.path[:1] == ("defaults",) and e.value == "_self_":
            continue
        if isinstance(e.path[-1], int) and e.path[:1] != ("defaults",):
            continue  # an item of a plain list
        if e.container and path_only:
            continue
        missing.append(e.path)
    return missing


def dotted(path: Key) -> str:
    """``("a", 0, "b")`` -> ``a[0].b``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
