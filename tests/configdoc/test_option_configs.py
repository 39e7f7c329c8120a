"""``configdoc.options.OptionConfigs`` (the root composed once, each option merged in) gives, for every option
of every group, the config Hydra composes for ``group=option``: the same keys and values, unresolved, and the
same schema type and declared type at every node; and it refuses a defaults entry it cannot read."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from gigpo_lab.config_paths import compose_config, conf_dir, config_groups
from gigpo_lab.configdoc import options
from gigpo_lab.configdoc.options import OptionConfigs, option_node

CONF = conf_dir()
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


@pytest.mark.parametrize(
    ("package", "entry"),
    [
        ("", "{x: y}"),  # not a string
        ("", "/schema/env/frozenlake"),  # a stored schema not at _here_
        ("", "frozenlake@other"),  # a placed option in a file that is not _global_
        ("# @package _global_\n", "frozenlake@a.b"),  # a dotted package
    ],
)
def test_a_defaults_entry_it_cannot_read_is_refused_by_name(tmp_path, monkeypatch, package, entry):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "odd.yaml").write_text(f"{package}defaults:\n  - {entry}\n  - _self_\nname: odd\n")
    monkeypatch.setattr(options, "conf_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"odd\.yaml: defaults entry .* is not one the docs can read"):
        option_node("env", "odd")


def test_a_placed_option_is_looked_up_in_the_files_own_group(configs, tmp_path, monkeypatch):
    """``gpu@elsewhere`` in a ``_global_`` option of ``lightning`` is ``lightning/gpu`` placed at ``elsewhere``."""
    want = option_node("lightning", "gpu")
    (tmp_path / "lightning").mkdir()
    (tmp_path / "lightning" / "gpu.yaml").write_text((CONF / "lightning" / "gpu.yaml").read_text())
    (tmp_path / "lightning" / "odd.yaml").write_text("# @package _global_\ndefaults:\n  - gpu@elsewhere\n")
    monkeypatch.setattr(options, "conf_dir", lambda: tmp_path)
    got = option_node("lightning", "odd")
    assert list(got) == ["elsewhere"]
    assert OmegaConf.to_yaml(got.elsewhere, resolve=False) == OmegaConf.to_yaml(want, resolve=False)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "# @package _global_\ntracking:\n  experiment: x\n",
            r"sets \['tracking'\], groups the root composes after",
        ),
        ("# @package lightning.inner\naccelerator: cpu\n", r"package 'lightning.inner' is not one the docs"),
    ],
)
def test_an_option_the_docs_would_misread_is_refused(configs, tmp_path, monkeypatch, text, error):
    (tmp_path / "lightning").mkdir()
    (tmp_path / "lightning" / "odd.yaml").write_text(text)
    (tmp_path / "config.yaml").write_text((CONF / "config.yaml").read_text())
    monkeypatch.setattr(options, "conf_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=error):
        configs["lightning", "odd"]


def test_hydra_reads_a_package_only_in_the_leading_header(tmp_path):
    """Hydra stops reading the header at the first line that is not ``# @...``: a later ``# @package`` is a
    comment, for Hydra and here."""
    path = tmp_path / "x.yaml"
    path.write_text("\n# @package _global_\na: 1\n")
    assert options.package_of(path) == "_global_"
    path.write_text("# a description\n# @package _global_\na: 1\n")
    assert options.package_of(path) is None


def test_the_docs_header_reads_the_package_by_hydras_rule(tmp_path):
    """``collect.header`` takes the package from ``package_of``: a ``# @package`` after a description line is a
    comment (Hydra's rule), and the description leaves out the ``# @`` lines."""
    from gigpo_lab.configdoc.collect import header

    path = tmp_path / "x.yaml"
    path.write_text("# @package hydra.launcher\n# Runs jobs here.\na: 1\n")
    assert header(path) == ("Runs jobs here.", "hydra.launcher")
    path.write_text("# Runs jobs here.\n# @package _global_\na: 1\n")
    assert header(path) == ("Runs jobs here.", None)
