"""Read every config group, option and key from the schemas: type, default, allowed values and meaning.

Each option of a config group (``config_paths.config_groups``: the schemas stored as options and the YAML files
of ``conf/<group>/``) is read as ``compose_config([f"{group}={option}"])`` gives it (``options.OptionConfigs``,
which composes the root once), so schemas, parents and defaults apply exactly as in a run; values are read unresolved (``${..temperature}`` stays as written). A key's
**meaning** is its schema field's ``#:`` comment, the one place a key is documented, found through the schema
type of the composed node (``OmegaConf.get_type``); **allowed** lists the field's Enum values, or the interval
its ``param`` declares (``schema_bounds``). An option's
description is its schema's docstring, or for an option file its leading comment block (what the file is for;
a key's YAML comment is a "why" of that file and is never read). The run-level keys of ``conf/config.yaml``
are documented by ``config_paths.RunKeys``. ``experiments/``, ``sweeps/`` and Hydra's own groups are
``# @package`` override files without a schema: they are listed as written, values only.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path
from typing import Any

from gigpo_lab.config_paths import config_root
from gigpo_lab.configdoc.options import OptionConfigs, package_of

Key = tuple[str | int, ...]
#: Hydra's own keys of an instantiable node, with their meaning.
HYDRA_KEYS: dict[str, str] = {
    "_target_": "The class or function that Hydra's instantiate calls with the other keys.",
    "_partial_": "true: instantiate returns a partial; the trainer passes the remaining arguments.",
    "_convert_": "all: Hydra passes lists and dicts as plain Python containers.",
}
#: Folders of the config root (beside conf/) whose files are `# @package _global_` override files.
GLOBAL_GROUPS = ("experiments", "sweeps")


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
    """One option of a group: its file (None for a schema stored as the option), description, keys, notes."""

    group: str
    name: str
    path: Path | None
    header: str
    rows: list[Row]
    notes: list[str]
    typed: bool = True


@dataclasses.dataclass
class Reference:
    """Everything CONFIG.md shows."""

    root: Path
    defaults: dict[str, str]  # group -> default option, from the root defaults list
    run_keys: list[Row]
    hydra_keys: list[Row]
    groups: dict[str, list[Option]]


def header(path: Path) -> tuple[str, str | None]:
    """A config file's description (its leading comment block, joined, ``# @`` lines left out) and its
    ``# @package`` (``options.package_of``: None or ``_global_``)."""
    parts = []
    for line in path.read_text().splitlines():
        if not line.lstrip().startswith("#"):
            break
        text = line.lstrip()[1:].strip()
        if text and not text.startswith("@"):
            parts.append(text)
    return " ".join(parts), package_of(path)


def dotted(path: Key) -> str:
    """``("a", 0, "b")`` -> ``a[0].b``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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


def schema_docs(cls: type | None, prefix: str = "") -> dict[str, str]:
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
            docs.update(schema_docs(kind, f"{prefix}{f.name}."))
    return docs


def schema_bounds(cls: type | None, prefix: str = "") -> dict[str, str]:
    """What each bounded field of a dataclass schema allows (``an integer >= 1``), by dotted key, read from the
    interval its ``param`` declares; the fields of a nested dataclass field too."""
    import typing

    from gigpo_lab.algorithm.settings import allowed_values, bounded_fields

    if not dataclasses.is_dataclass(cls):
        return {}
    out = {
        prefix + name: allowed_values(kind, interval) + (", or null" if optional else "")
        for name, kind, optional, interval in bounded_fields(cls)
        if interval.low is not None or interval.high is not None  # param() alone: any finite number
    }
    for name, kind in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(kind) and not name.startswith("_"):
            out.update(schema_bounds(kind, f"{prefix}{name}."))
    return out


# private (omegaconf): a node's declared type and optionality (_metadata.ref_type, .optional), its raw value
# unresolved (_value, _is_interpolation, _is_none, _is_missing) and a child node rather than its value
# (_get_node) have no public reader; the public OmegaConf.* helpers resolve or convert the value, which a
# reference of unresolved defaults cannot use. omegaconf is pinned to 2.3 (pyproject.toml);
# tests/test_private_apis.py checks each of them.


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


def _enum_choices(node) -> tuple[str, ...] | None:
    from omegaconf.nodes import EnumNode

    if isinstance(node, EnumNode) and issubclass(node.enum_type, enum.Enum):
        return tuple(m.name for m in node.enum_type)
    return None


def _written(data: Any, prefix: Key = ()):
    """(path, value, holds_keys) of every key of a plain loaded YAML mapping, depth first (lists as values)."""
    for key, value in data.items():
        path = (*prefix, key)
        yield path, value, isinstance(value, dict)
        if isinstance(value, dict):
            yield from _written(value, path)


def _doc(cls: type | None) -> str:
    return " ".join((cls.__doc__ or "").split()) if dataclasses.is_dataclass(cls) else ""


def group_option(group: str, name: str, configs: OptionConfigs) -> Option:
    """One option of a ``conf/`` group, composed (``configs[group, name]``)."""
    from omegaconf import OmegaConf

    from gigpo_lab.config_paths import conf_dir

    path = conf_dir() / group / f"{name}.yaml"
    path = path if path.is_file() else None
    description, package = header(path) if path else ("", None)
    written = OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path else {}
    parents = [d for d in written.pop("defaults", []) if isinstance(d, str) and d != "_self_"]
    cfg = configs[group, name]
    if package == "_global_":  # lightning/ddp also sets trainer.minibatch_size: its keys from the root
        tops = [k for k in written if k in cfg]
        nodes = {f"{k}.": cfg._get_node(k) for k in tops}
    else:
        nodes = {"": cfg._get_node(group)}
    docs, bounds, notes = {}, {}, []
    for prefix, node in nodes.items():
        cls = OmegaConf.get_type(node)
        docs.update(schema_docs(cls, prefix))
        bounds.update(schema_bounds(cls, prefix))
        if prefix == "":
            description = description or _doc(cls)
        notes.append(
            f"Typed schema `{cls.__module__}.{cls.__qualname__}`"
            + (f" (at `{prefix.rstrip('.')}`)" if prefix else "")
            + ": a misspelt key or a bad value fails when the config is composed."
        )
    same_group = [p.split("@")[0] for p in parents if not p.startswith("/")]
    for parent in same_group:
        notes.append(f"Extends `{group}={parent}`: every key not listed here is as there.")
    if path is None:
        notes.append("No YAML file: the schema is the option (`gigpo_lab.config_paths.register_schemas`).")
    own = {p for p, _, _ in _written(written)}
    rows = []
    for prefix, node in nodes.items():
        raw = OmegaConf.to_container(node, resolve=False, enum_to_str=True)
        for key_path, child in _flatten(node):
            full = (*prefix.rstrip(".").split("."), *key_path) if prefix else key_path
            if (same_group or package == "_global_") and full not in own:
                continue  # an option that extends another one of its group lists only what it changes
            if isinstance(key_path[-1], int):
                continue  # an item of a list of mappings: its keys have rows
            key = dotted(full)
            meaning = docs.get(key) or HYDRA_KEYS.get(key.rsplit(".", 1)[-1], "")
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            if not meaning and parent in docs:
                meaning = f"An entry of `{parent}`."
            value = _index(raw, key_path)
            full_key = key if package == "_global_" else f"{group}.{key}"
            type_ = _node_type(cfg, full_key, child)
            choices = _enum_choices(child)
            default = "" if _holds_mappings(child) and value else flow(value)
            allowed = ", ".join(f"`{c}`" for c in choices) if choices else bounds.get(key, "")
            rows.append(Row(key, type_, default, allowed, meaning))
    return Option(group, name, path, description, rows, notes)


def _index(data: Any, path: Key) -> Any:
    for part in path:
        data = data[part]
    return data


def raw_option(group: str, path: Path) -> Option:
    """A file listed as written, not composed: an override file of experiments/ or sweeps/ (``# @package
    _global_``), or an option of one of Hydra's own groups (``conf/hydra/...``), whose schema comes from a
    plugin that may not be installed, so that CONFIG.md does not depend on the machine."""
    from omegaconf import OmegaConf

    description, package = header(path)
    written = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    rows, notes = [], []
    for entry in written.pop("defaults", []):
        value = entry if isinstance(entry, str) else ", ".join(f"{k}: {v}" for k, v in entry.items())
        if value != "_self_":
            rows.append(Row("defaults", "", str(value), "", ""))
    for key_path, value, holds_keys in _written(written):
        if not holds_keys or not value:
            rows.append(Row(dotted(key_path), "", flow(value), "", ""))
    if group not in GLOBAL_GROUPS:
        notes.append(
            f"An option of Hydra's `{group}` group (package `{package or group.replace('/', '.')}`)."
        )
    return Option(group, path.stem, path, description, rows, notes, typed=False)


def _root_rows(conf: Path, cfg) -> tuple[list[Row], list[Row], dict[str, str]]:
    """The run-level keys (``RunKeys``: meaning and type; default: the composed config), the root's hydra keys
    as written, and the default option of each group."""
    from omegaconf import OmegaConf

    from gigpo_lab.config_paths import RunKeys

    docs = schema_docs(RunKeys)
    run = []
    for f in dataclasses.fields(RunKeys):
        type_ = _node_type(cfg, f.name, cfg._get_node(f.name))
        run.append(Row(f.name, type_, flow(cfg[f.name]), "", docs.get(f.name, "")))
    written = OmegaConf.to_container(OmegaConf.load(conf / "config.yaml"), resolve=False)
    defaults = {}
    for entry in written.get("defaults", []):
        if isinstance(entry, dict):
            ((group, option),) = entry.items()
            if not group.startswith("override"):
                defaults[group] = plain(option)
    hydra = [
        Row(dotted(("hydra", *p)), "", flow(v), "", "")
        for p, v, holds in _written(written.get("hydra", {}))
        if not holds
    ]
    return run, hydra, defaults


def collect(root: Path | None = None) -> Reference:
    """Every group (in the root defaults order, then by name), option (by name) and key."""
    from gigpo_lab.config_paths import config_groups

    root = root or config_root()
    conf = root / "conf"
    configs = OptionConfigs()
    run_keys, hydra_keys, defaults = _root_rows(conf, configs.root)
    groups: dict[str, list[Option]] = {
        group: [group_option(group, name, configs) for name in names]
        for group, names in config_groups().items()
    }
    for path in sorted((conf / "hydra").rglob("*.yaml")):
        groups.setdefault(path.parent.relative_to(conf).as_posix(), []).append(
            raw_option(path.parent.relative_to(conf).as_posix(), path)
        )
    for group in GLOBAL_GROUPS:
        for path in sorted((root / group).glob("*.yaml")):
            groups.setdefault(group, []).append(raw_option(group, path))
    order = list(defaults)
    ranked = sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))
    return Reference(root, defaults, run_keys, hydra_keys, {g: groups[g] for g in ranked})
