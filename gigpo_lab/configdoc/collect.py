"""Read every config group, option and key: type, default, allowed values and meaning (see the package doc).

Options of the groups in ``conf/`` are composed with Hydra (``compose_config([f"{group}={option}"])``),
so schemas, same-group parents (``trainer/gpu.yaml`` extends ``cpu``) and defaults are applied exactly as
in a run; values are read unresolved (``${..temperature}`` stays as written). ``experiments/`` and
``sweeps/`` hold ``# @package _global_`` override files: their keys are listed as written.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path
from typing import Any

from gigpo_lab.config_paths import config_root
from gigpo_lab.configdoc.comments import CommentedYaml, Key, dotted, parse_file

#: Hydra's own keys of an instantiable node, with their meaning.
HYDRA_KEYS: dict[str, str] = {
    "_target_": "The class or function that Hydra's instantiate calls with the other keys.",
    "_partial_": "true: instantiate returns a partial; the trainer passes the remaining arguments.",
    "_convert_": "all: Hydra passes lists and dicts as plain Python containers.",
}
#: Folders of the config root (beside conf/) whose files are `# @package _global_` override files.
GLOBAL_GROUPS = ("experiments", "sweeps")
_TOKEN = r"[A-Za-z0-9_][A-Za-z0-9_.+\-]*"


@dataclasses.dataclass
class Row:
    """One key of one option. ``key`` is dotted (``optimizer.lr``); the rest is Markdown-ready text."""

    key: str
    type: str
    default: str
    allowed: str
    meaning: str


@dataclasses.dataclass
class Option:
    """One option (YAML file) of a group: where it is, its parsed comments, its keys and notes."""

    group: str
    name: str
    path: Path
    parsed: CommentedYaml
    rows: list[Row]
    notes: list[str]


@dataclasses.dataclass
class Reference:
    """Everything CONFIG.md shows."""

    root: Path
    top: CommentedYaml
    defaults: dict[str, tuple[str, str]]  # group -> (default option, comment) from the root defaults list
    run_keys: list[Row]
    hydra_keys: list[Row]
    groups: dict[str, list[Option]]


def _strip_parens(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def comment_choices(comment: str, default: object = None) -> list[str] | None:
    """The alternatives a comment lists as ``a | b (why) | c = what; more``, or None if it lists none.

    Parenthesised text is ignored and the list ends at the first ';'. The first alternative is what follows
    the last ':' before the first '|'. Each alternative is one token, followed by nothing, '=' or ','. A
    non-null default must be one of them; otherwise the '|' was prose and the result is None.
    """
    clause = _strip_parens(comment).split(";")[0]
    if "|" not in clause:
        return None
    parts = clause.split("|")
    parts[0] = parts[0].rsplit(":", 1)[-1]
    found = []
    for part in parts:
        m = re.fullmatch(rf"\s*({_TOKEN})\s*(?:[=,].*)?", part)
        if m is None:
            return None
        found.append(m.group(1))
    if default is not None and plain(default) not in found:
        return None
    return found


def plain(value: object) -> str:
    """A scalar as YAML writes it: true, null, 0.95, text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flow(value: object) -> str:
    """A value as one line of YAML."""
    if isinstance(value, str) and value == "???":
        return "??? (required)"
    if isinstance(value, list | dict):
        import yaml

        return yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return '""' if value == "" else plain(value)


def _schema_docs(cls: type | None, prefix: str = "") -> dict[str, str]:
    """The ``#:`` comments above the fields of a dataclass schema and its bases, by dotted key; the fields of
    a nested dataclass field (``lora.r``) too, and the docstring of its type for the field itself unless it has
    its own ``#:`` comment."""
    import typing

    docs: dict[str, str] = {}
    if not dataclasses.is_dataclass(cls):
        return docs
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        pending: list[str] = []
        for line in inspect.getsource(klass).splitlines():
            text = line.strip()
            if text.startswith("#:"):
                pending.append(text[2:].strip())
            elif m := re.match(r"(\w+)\s*:", text):
                if pending:
                    docs[prefix + m.group(1)] = " ".join(pending)
                pending = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name)
        if dataclasses.is_dataclass(kind):
            docs.setdefault(prefix + f.name, " ".join((kind.__doc__ or "").split()))
            docs.update(_schema_docs(kind, f"{prefix}{f.name}."))
    return docs


def _node_type(cfg, full_key: str, node) -> str:
    """The type of a composed node: its schema type, else the type of its (resolved) value."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.nodes import AnyNode, EnumNode

    if isinstance(node, DictConfig):
        return "mapping"
    if isinstance(node, ListConfig):
        return "list"
    typed = not isinstance(node, AnyNode)
    optional = " | null" if typed and node._metadata.optional else ""
    if isinstance(node, EnumNode):
        return f"enum {node.enum_type.__name__}{optional}"
    if typed:
        return getattr(node._metadata.ref_type, "__name__", str(node._metadata.ref_type)) + optional
    value: Any = node._value()
    if node._is_interpolation():
        try:
            value = OmegaConf.select(cfg, full_key)
        except Exception:  # noqa: BLE001 - an interpolation that needs run-time values
            return "interpolation"
    if value is None or value == "???":
        return "—"
    if isinstance(value, DictConfig | dict):
        return "mapping"
    if isinstance(value, ListConfig | list):
        return "list"
    return type(value).__name__


def _holds_mappings(node) -> bool:
    from omegaconf import DictConfig, ListConfig

    if node._is_none() or node._is_missing() or node._is_interpolation():
        return False
    if isinstance(node, DictConfig):
        return True
    return isinstance(node, ListConfig) and any(
        isinstance(node._get_node(i), DictConfig) for i in range(len(node))
    )


def _flatten(node, prefix: Key = ()):
    """(path, node) for every key of a composed config node, depth first; lists of mappings by index."""
    from omegaconf import DictConfig

    keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        child = node._get_node(key)
        path = (*prefix, key)
        yield path, child
        if _holds_mappings(child):
            yield from _flatten(child, path)


def _defaults_list(parsed: CommentedYaml) -> list[tuple[object, str]]:
    """(entry value, comment) of a file's defaults list."""
    return [(e.value, e.comment) for e in parsed.entries if len(e.path) == 2 and e.path[0] == "defaults"]


def _lineage(group_dir: Path, name: str) -> tuple[list[CommentedYaml], list[str]]:
    """The option and its same-group parents (nearest first), and the ConfigStore schemas they name."""
    files, schemas, todo = [], [], [name]
    while todo:
        parsed = parse_file(group_dir / f"{todo.pop(0)}.yaml")
        files.append(parsed)
        for value, _ in _defaults_list(parsed):
            if isinstance(value, str) and value != "_self_":
                if value.startswith("/"):  # /schema/<group>/<option>@_here_: a ConfigStore schema
                    schemas.append(value.split("@")[0].lstrip("/"))
                else:  # a same-group parent, maybe placed (``gpu@lightning`` in a _global_ option)
                    todo.append(value.split("@")[0])
    return files, schemas


def _index(data: Any, path: Key) -> Any:
    for part in path:
        data = data[part]
    return data


def group_option(group: str, path: Path) -> Option:
    """One option of a ``conf/`` group, composed."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from gigpo_lab.config_paths import compose_config

    name = path.stem
    lineage, schemas = _lineage(path.parent, name)
    parsed = lineage[0]
    cfg = compose_config([f"{group}={name}"])
    package = parsed.package or group.replace("/", ".")
    # a _global_ option (lightning/ddp also sets trainer.minibatch_size) lists its keys from the root
    node = cfg if package == "_global_" else OmegaConf.select(cfg, package)
    prefix = f"{group.replace('/', '.')}." if package == "_global_" else ""
    raw = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
    notes, field_docs = [], {}
    for schema in schemas:
        cls = OmegaConf.get_type(ConfigStore.instance().load(f"{schema}.yaml").node)
        field_docs.update({prefix + k: v for k, v in _schema_docs(cls).items()})
        notes.append(
            f"Typed schema `{cls.__module__}.{cls.__qualname__}`: a misspelt key or a bad value fails when "
            "the config is composed."
        )
    for value, _ in _defaults_list(parsed):
        if isinstance(value, str) and (path.parent / f"{value.split('@')[0]}.yaml").is_file():
            notes.append(f"Extends `{group}={value.split('@')[0]}`: every key not listed here is as there.")
    own = {e.path for e in parsed.entries}
    inherited = {e.path for p in lineage[1:] for e in p.entries}
    comments = [p.comments() for p in lineage]
    order: dict[Key, int] = {}
    for p in lineage:
        for e in p.entries:
            order.setdefault(e.path, len(order))
    flat = sorted(enumerate(_flatten(node)), key=lambda x: order.get(x[1][0], len(order) + x[0]))
    rows = []
    for _, (key_path, child) in flat:
        if key_path not in own and (key_path in inherited or len(lineage) > 1):
            continue  # an option that extends another one of its group lists only what it changes
        if isinstance(key_path[-1], int):
            continue  # an item of a list of mappings: its keys have rows
        key = dotted(key_path)
        meaning = _meaning(key, field_docs, next((c[key_path] for c in comments if c.get(key_path)), ""))
        value = _index(raw, key_path)
        type_ = _node_type(cfg, key if package == "_global_" else f"{package}.{key}", child)
        choices = _enum_choices(child)
        if choices is None and type_ not in ("bool", "mapping", "list"):
            choices = comment_choices(meaning, value)
        default = "" if _holds_mappings(child) and value else flow(value)
        rows.append(Row(key, type_, default, ", ".join(f"`{c}`" for c in choices or ()), meaning))
    return Option(group, name, path, parsed, rows, notes)


def _meaning(key: str, field_docs: dict[str, str], comment: str) -> str:
    """A key's schema doc (or Hydra's meaning of ``_target_``-like keys), then the option's own short note."""
    doc = field_docs.get(key) or HYDRA_KEYS.get(key.rsplit(".", 1)[-1], "")
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    if not doc and parent in field_docs:
        doc = f"An entry of `{parent}`."
    if doc and comment:
        return f"{doc} Here: {comment}"
    return doc or comment


def _enum_choices(node) -> tuple[str, ...] | None:
    from omegaconf.nodes import EnumNode

    if isinstance(node, EnumNode) and issubclass(node.enum_type, enum.Enum):
        return tuple(m.name for m in node.enum_type)
    return None


def _raw_type(value: object) -> str:
    if value is None or value == "???":
        return "—"
    if isinstance(value, str) and "${" in value:
        return "interpolation"
    return {dict: "mapping", list: "list"}.get(type(value), type(value).__name__)


def raw_option(group: str, path: Path, *, typed: bool) -> Option:
    """An option listed as written, not composed: an override file (``# @package _global_``, untyped), or an
    option of one of Hydra's own groups (``conf/hydra/...``, typed from the values), whose schema comes from
    a plugin that may not be installed, so that CONFIG.md does not depend on the machine."""
    parsed = parse_file(path)
    rows, notes = [], []
    for e in parsed.entries:
        if e.path == ("defaults",) or isinstance(e.path[-1], int) and e.path[0] != "defaults":
            continue
        if e.path[0] == "defaults":
            value = (
                e.value if isinstance(e.value, str) else ", ".join(f"{k}: {v}" for k, v in e.value.items())
            )
            if typed:
                why = f": {e.comment.rstrip('.')}" if e.comment else ""
                notes.append(f"Starts from `{value}`{why}.")
            else:
                rows.append(Row("defaults", "", str(value), "", e.comment))
        elif typed:
            type_ = _raw_type(e.value)
            choices = (
                comment_choices(e.comment, e.value) if type_ not in ("bool", "mapping", "list") else None
            )
            default = "" if e.container and e.value else flow(e.value)
            rows.append(
                Row(dotted(e.path), type_, default, ", ".join(f"`{c}`" for c in choices or ()), e.comment)
            )
        elif not e.container:
            rows.append(Row(dotted(e.path), "", flow(e.value), "", e.comment))
    if typed:
        package = parsed.package or group.replace("/", ".")
        notes.insert(0, f"An option of Hydra's `{group}` group (package `{package}`), listed as written.")
    return Option(group, path.stem, path, parsed, rows, notes)


def _root_rows(root: Path, top: CommentedYaml) -> tuple[list[Row], list[Row]]:
    """The root config's run-level keys (typed from the composed default config) and its hydra keys."""
    from gigpo_lab.config_paths import compose_config

    cfg = compose_config([])
    run, hydra = [], []
    for e in top.entries:
        if e.path[0] == "defaults" or e.container or isinstance(e.path[-1], int):
            continue
        if e.path[0] == "hydra":
            hydra.append(Row(dotted(e.path), "", flow(e.value), "", e.comment))
            continue
        type_ = _node_type(cfg, dotted(e.path), cfg._get_node(e.path[0]))
        choices = comment_choices(e.comment, e.value) if type_ not in ("bool",) else None
        run.append(
            Row(dotted(e.path), type_, flow(e.value), ", ".join(f"`{c}`" for c in choices or ()), e.comment)
        )
    return run, hydra


def collect(root: Path | None = None) -> Reference:
    """Every group (in the root defaults order, then by name), option (by name) and key (in file order)."""
    root = root or config_root()
    conf = root / "conf"
    top = parse_file(conf / "config.yaml")
    defaults = {}
    for value, comment in _defaults_list(top):
        if isinstance(value, dict):
            ((group, option),) = value.items()
            defaults[group] = (plain(option), comment)
    groups: dict[str, list[Option]] = {}
    for path in sorted(conf.rglob("*.yaml")):
        if path.parent != conf:
            group = path.parent.relative_to(conf).as_posix()
            hydra_own = group.split("/")[0] == "hydra"
            option = raw_option(group, path, typed=True) if hydra_own else group_option(group, path)
            groups.setdefault(group, []).append(option)
    for group in GLOBAL_GROUPS:
        for path in sorted((root / group).glob("*.yaml")):
            groups.setdefault(group, []).append(raw_option(group, path, typed=False))
    order = list(defaults)
    ranked = sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))
    run_keys, hydra_keys = _root_rows(root, top)
    return Reference(root, top, defaults, run_keys, hydra_keys, {g: groups[g] for g in ranked})
