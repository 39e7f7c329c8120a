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

``tests/docs/test_config_md.py`` checks the result against Hydra's own composition for every option.
"""

from __future__ import annotations

from gigpo_lab.config_paths import compose_config, conf_dir, register_schemas


def _stored(path: str):
    """The node Hydra's ConfigStore holds at ``path`` (``schema/env/frozenlake`` or ``estimator/grpo``)."""
    from hydra.core.config_store import ConfigStore

    return ConfigStore.instance().load(f"{path}.yaml").node


def _package(path) -> str | None:
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text.startswith("#"):
            return None
        if text[1:].strip().startswith("@package"):
            return text[1:].strip().split(None, 1)[1].strip()
    return None


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
    parts = []
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
        elif not target.startswith("/") and _package(path) == "_global_" and "." not in package:
            parts.append(OmegaConf.create({package: option_node(package, target)}))
        else:
            raise ValueError(f"{path}: defaults entry {entry!r} is not one the docs can read (module doc)")
    return OmegaConf.merge(*parts)


class OptionConfigs:
    """``configs[group, name]``: the whole config of a run with ``group=name``, as ``compose_config`` gives it
    (unresolved), built from one composition of the root."""

    def __init__(self) -> None:
        register_schemas()
        self.root = compose_config([])

    def __getitem__(self, key: tuple[str, str]):
        from omegaconf import OmegaConf, open_dict

        group, name = key
        cfg = self.root.copy()
        node = option_node(group, name)
        path = conf_dir() / group / f"{name}.yaml"
        if path.is_file() and _package(path) == "_global_":
            with open_dict(cfg):
                return OmegaConf.merge(cfg, node)
        with open_dict(cfg):
            cfg[group] = node
        return cfg
