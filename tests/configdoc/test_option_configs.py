"""``configdoc.options.OptionConfigs`` (the root composed once, each option merged in) gives, for every option
of every group, the config Hydra composes for ``group=option``: the same keys and values, unresolved, and the
same schema type and declared type at every node; and it refuses a defaults entry it cannot read."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from gigpo_lab.config_paths import compose_config, config_groups
from gigpo_lab.configdoc import options
from gigpo_lab.configdoc.options import OptionConfigs, option_node

OPTIONS = [(group, name) for group, names in config_groups().items() for name in names]


def node_types(node, path=()):
    """{path: (schema type, declared type, optional)} of every node under ``node``, depth first."""
    out = {}
    keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        child = node._get_node(key)
        meta = child._metadata
        out[(*path, key)] = (OmegaConf.get_type(node, key), meta.ref_type, meta.optional)
        if isinstance(child, DictConfig | ListConfig) and not child._is_none() and not child._is_missing():
            out.update(node_types(child, (*path, key)))
    return out


@pytest.fixture(scope="module")
def configs() -> OptionConfigs:
    return OptionConfigs()


@pytest.mark.parametrize(("group", "name"), OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_an_option_config_is_what_hydra_composes(configs, group, name):
    fast, hydra = configs[group, name], compose_config([f"{group}={name}"])
    assert OmegaConf.to_yaml(fast, resolve=False) == OmegaConf.to_yaml(hydra, resolve=False)
    assert node_types(fast) == node_types(hydra)


def test_the_root_is_not_changed_by_reading_options(configs):
    before = OmegaConf.to_yaml(configs.root, resolve=False)
    for group, name in OPTIONS:
        configs[group, name]
    assert OmegaConf.to_yaml(configs.root, resolve=False) == before == OmegaConf.to_yaml(compose_config([]))


def test_a_defaults_entry_it_cannot_read_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "odd.yaml").write_text(
        "defaults:\n  - /hydra/launcher@x: local\n  - _self_\nname: odd\n"
    )
    monkeypatch.setattr(options, "conf_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"odd\.yaml: defaults entry .* is not one the docs can read"):
        option_node("env", "odd")
