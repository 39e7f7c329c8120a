"""The config of a run that picks one option of a group, built from the root config composed once.

``gigpo-lab docs`` needs, for each of about 40 options, the config that ``compose_config([f"{group}={name}"])``
gives. Composing each through Hydra costs ~0.13 s of CPU (Hydra rebuilds the root's whole defaults tree and
its own ``hydra`` node every time), so ``docs`` took 5.5 s. Here the root is composed once; an option's node is
its defaults list merged in order, from the option files of ``conf/`` and the schemas Hydra's ConfigStore holds
(``config_paths.register_schemas``), and it replaces its group's node in a copy of the root, or, for a
``# @package _global_`` option, is merged into that copy. The lab's option files use four forms of defaults
entry, and only these are read (anything else raises, so a new form is noticed):

- ``_self_``: the file's own keys (at the end when absent, as Hydra does);
- ``/schema/<group>/<name>@_here_``: a stored schema at this option's package;
- ``<name>``: another option of the same group, which this one extends;
- ``<name>@<key>``: in a ``_global_`` option, an option of group ``<key>`` placed at ``<key>``.

``tests/configdoc/test_option_configs.py`` checks the result against Hydra's own composition for every option.
"""

from __future__ import annotations

from gigpo_lab.config_paths import compose_config, conf_dir, register_schemas


def _stored(path: str):
    """The node Hydra's ConfigStore holds at ``path`` (``schema/env/frozenlake`` or ``estimator/grpo``)."""
    from hydra.core.config_store import ConfigStore

    return ConfigStore.instance().load(f"{path}.yaml").node


def package_of(path) -> str | None:
    """The file's ``# @package``, read as Hydra reads a header: blank lines skipped, stopping at the first line
    that is not ``# @...``."""
    import re

    package = None
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text:
            continue
        if not re.match(r"#\s*@", text):
            break
        key, _, value = text.lstrip("#").strip().partition(" ")
        if key == "@package":
            package = value.strip()
    return package


def option_node(group: str, name: str):
    """The option's node, unresolved: for an option of package ``_global_``, a root-level mapping."""
    from omegaconf import OmegaConf

    path = conf_dir() / group / f"{name}.yaml"
    if not path.is_file():
        return _stored(f"{group}/{name}")
    own = OmegaConf.load(path)
    defaults = list(own.pop("defaults", []))
    if "_self_" not in defaults:
        defaults.append("_self_")
    header = package_of(path)
    if header not in (None, "_global_"):  # only these two are composed here
        raise ValueError(f"{path}: package {header!r} is not one the docs can read (module doc)")
    parts, is_global = [], header == "_global_"
    for entry in defaults:
        if not isinstance(entry, str):
            raise ValueError(f"{path}: defaults entry {entry!r} is not one the docs can read (module doc)")
        target, _, package = entry.partition("@")
        if entry == "_self_":
            parts.append(own)
        elif target.startswith("/") and package == "_here_":
            parts.append(_stored(target.lstrip("/")))
        elif not target.startswith("/") and not package:
            parts.append(option_node(group, target))
        elif not target.startswith("/") and is_global and "." not in package:
            parts.append(OmegaConf.create({package: option_node(group, target)}))
        else:
            raise ValueError(f"{path}: defaults entry {entry!r} is not one the docs can read (module doc)")
    return OmegaConf.merge(*parts)


class OptionConfigs:
    """``configs[group, name]``: the whole config of a run with ``group=name``, as ``compose_config`` gives it
    (unresolved), built from one composition of the root."""

    def __init__(self) -> None:
        from omegaconf import OmegaConf

        register_schemas()
        self.root = compose_config([])
        #: the root's groups in the order its defaults list composes them
        written = OmegaConf.load(conf_dir() / "config.yaml").get("defaults", [])
        keys = [next(iter(e)) for e in written if not isinstance(e, str) and len(e) == 1]
        self.groups = [k.removeprefix("optional ") for k in keys if not k.startswith("override ")]

    def __getitem__(self, key: tuple[str, str]):
        from omegaconf import OmegaConf, open_dict

        group, name = key
        cfg = self.root.copy()
        node = option_node(group, name)
        path = conf_dir() / group / f"{name}.yaml"
        if path.is_file() and package_of(path) == "_global_":
            later = self.groups[self.groups.index(group) + 1 :] if group in self.groups else self.groups
            if clash := sorted(set(node) & set(later)):
                raise ValueError(
                    f"{path}: sets {clash}, groups the root composes after {group!r}; the docs merge a _global_ "
                    "option last, so they cannot read it"
                )
            with open_dict(cfg):  # as in a run, the group's default option is replaced, not merged under
                if group in node:
                    cfg[group] = node[group]
                else:
                    del cfg[group]
                return OmegaConf.merge(cfg, {k: v for k, v in node.items_ex(resolve=False) if k != group})
        with open_dict(cfg):
            cfg[group] = node
        return cfg
