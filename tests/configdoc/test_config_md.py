"""docs/CONFIG.md cannot drift: it equals what `gigpo-lab docs` generates from the schemas, every key of
every option is documented there once (its schema's ``#:`` comment) and appears in it, and every choice is an
Enum of its schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gigpo_lab import configdoc
from gigpo_lab.config_paths import RunKeys, all_schemas, compose_config, config_groups, config_root
from gigpo_lab.configdoc import generate, main
from gigpo_lab.configdoc.collect import _written, dotted

ROOT = config_root()
CONFIG_MD = ROOT / "docs" / "CONFIG.md"
YAML_FILES = sorted(
    [*ROOT.glob("conf/**/*.yaml"), *ROOT.glob("experiments/*.yaml"), *ROOT.glob("sweeps/*.yaml")]
)

#: The groups typed by a schema: their keys are documented there (``#:``), not in the YAML.
TYPED_GROUPS = {key.split("/")[0] for key in all_schemas()}


@pytest.fixture(scope="module")
def generated() -> str:
    return generate()


def test_config_md_is_what_gigpo_lab_docs_generates(capsys):
    code = main(["--check"])
    err = capsys.readouterr().err
    assert code == 0, err


def test_check_fails_on_a_stale_file_and_says_how_to_fix_it(tmp_path, capsys, generated, monkeypatch):
    monkeypatch.setattr(configdoc, "generate", lambda: generated)
    stale = tmp_path / "CONFIG.md"
    stale.write_text(generated.replace("| `gamma` |", "| `gama` |"))
    assert main(["--check", "--out", str(stale)]) == 1
    err = capsys.readouterr().err
    assert "out of date" in err and "run `gigpo-lab docs`" in err and "gama" in err
    assert main(["--check", "--out", str(tmp_path / "missing.md")]) == 1
    assert main(["--out", str(stale)]) == 0 and stale.read_text() == generated
    assert main(["--check", "--out", str(stale)]) == 0


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_key_of_a_typed_option_is_documented_in_its_schema(generated):
    """Each key is documented once, in its schema's ``#:`` comment: no row of CONFIG.md lacks a meaning."""
    assert TYPED_GROUPS >= {"estimator", "env", "model", "rollout", "loss", "trainer", "tracking"}
    assert "**(no comment)**" not in generated


def test_the_run_level_keys_are_documented_once():
    """RunKeys documents the root's own keys (their values are set in conf/config.yaml, once)."""
    root = OmegaConf.load(ROOT / "conf" / "config.yaml")
    own = {k for k in root if k not in ("defaults", "hydra")}
    assert own == {f.name for f in dataclasses.fields(RunKeys)}
    assert all(not hasattr(RunKeys, f.name) for f in dataclasses.fields(RunKeys)), "RunKeys holds no default"
    assert set(compose_config()) >= own


def test_no_config_file_is_only_a_shell():
    """An option equal to its schema is the schema itself (stored as the option), never a file that names it."""
    for path in ROOT.glob("conf/*/*.yaml"):
        written = OmegaConf.to_container(OmegaConf.load(path))
        assert set(written) - {"defaults"}, f"{_rel(path)} sets nothing: delete it, its schema is the option"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n### ", start + 1)
    return text[start : end if end > 0 else None]


@pytest.mark.parametrize("path", [p for p in YAML_FILES if p.parent.name != "conf"], ids=_rel)
def test_every_key_of_every_option_file_is_in_config_md(path, generated):
    in_conf = path.is_relative_to(ROOT / "conf")
    group = path.parent.relative_to(ROOT / "conf").as_posix() if in_conf else path.parent.name
    section = _section(generated, f"### `{group}={path.stem}`")
    assert f"`{_rel(path)}`" in section
    written = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    written.pop("defaults", None)
    for key, value, holds_keys in _written(written):
        if not (holds_keys and value):
            assert f"`{dotted(key)}`" in section, f"{_rel(path)}: {dotted(key)} missing"


def test_every_group_and_option_is_listed(generated):
    listed = generated.split("### Run-level keys")[0]
    for group, options in config_groups().items():
        for option in options:
            assert f"`{option}`" in listed and f"### `{group}={option}`" in generated
    for path in YAML_FILES:
        if path.parent.name != "conf":
            assert f"`{path.stem}`" in listed


#: (option override, dotted key): the choice fields; each must be an enum of its schema.
CHOICE_FIELDS = [
    ("estimator=gigpo", "mode"),
    ("estimator=gigpo", "normalize_over"),
    ("estimator=gigpo", "episode_singleton"),
    ("estimator=gigpo", "step_singleton"),
    ("loss=ppo", "aggregation"),
    ("loss=ppo", "kl_estimator"),
    ("env=gym_discrete", "success_on"),
    ("model=hf", "dtype"),
    ("model=tiny", "prompt_source"),
    ("lightning=cpu", "precision"),
    ("lightning=cpu", "accelerator"),
    ("rollout=vllm", "engine.dtype"),
]


@pytest.mark.parametrize(("option", "key"), CHOICE_FIELDS, ids=[f"{o}:{k}" for o, k in CHOICE_FIELDS])
def test_choice_fields_are_enums(option, key):
    """A choice is typed by an Enum, so a bad value fails at compose time listing the valid ones."""
    from omegaconf import OmegaConf
    from omegaconf.nodes import EnumNode

    from gigpo_lab.config_paths import compose_config

    group = option.split("=")[0]
    cfg = compose_config([option])
    parent, _, leaf = f"{group}.{key}".rpartition(".")
    assert isinstance(OmegaConf.select(cfg, parent)._get_node(leaf), EnumNode)
