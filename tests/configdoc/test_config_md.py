"""docs/CONFIG.md cannot drift: it equals what `gigpo-lab docs` generates, every key of every config file
has a comment (the house rule) and appears in it, and the choices the comments list agree with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigpo_lab import configdoc
from gigpo_lab.config_paths import all_schemas, config_root
from gigpo_lab.configdoc import generate, main
from gigpo_lab.configdoc.collect import comment_choices
from gigpo_lab.configdoc.comments import dotted, missing_comments, parse, parse_file

ROOT = config_root()
CONFIG_MD = ROOT / "docs" / "CONFIG.md"
YAML_FILES = sorted(
    [*ROOT.glob("conf/**/*.yaml"), *ROOT.glob("experiments/*.yaml"), *ROOT.glob("sweeps/*.yaml")]
)

#: Keys known to lack a comment, reported to their owners (not edited here). The test fails when one of
#: them gets its comment, so that this list only shrinks.
KNOWN_MISSING: set[tuple[str, str]] = set()
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


def test_every_key_of_every_untyped_config_file_has_a_comment():
    found = set()
    for path in YAML_FILES:
        if path.parent.parent == ROOT / "conf" and path.parent.name in TYPED_GROUPS:
            continue  # documented in the schema
        parsed = parse_file(path)
        for key in missing_comments(parsed, root_config=_rel(path) == "conf/config.yaml"):
            found.add((_rel(path), dotted(key)))
    new = sorted(found - KNOWN_MISSING)
    fixed = sorted(KNOWN_MISSING - found)
    assert not new, f"keys without a comment (house rule: say what each key is, inline or above): {new}"
    assert not fixed, f"these keys have a comment now; remove them from KNOWN_MISSING: {fixed}"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n### ", start + 1)
    return text[start : end if end > 0 else None]


@pytest.mark.parametrize("path", [p for p in YAML_FILES if p.parent.name != "conf"], ids=_rel)
def test_every_key_of_every_option_is_in_config_md(path, generated):
    in_conf = path.is_relative_to(ROOT / "conf")
    group = path.parent.relative_to(ROOT / "conf").as_posix() if in_conf else path.parent.name
    section = _section(generated, f"### `{group}={path.stem}`")
    assert f"`{_rel(path)}`" in section
    for entry in parse_file(path).entries:
        if (
            entry.path[0] == "defaults"
            or isinstance(entry.path[-1], int)
            or (entry.container and not in_conf)
        ):
            continue
        assert f"`{dotted(entry.path)}`" in section, f"{_rel(path)}: {dotted(entry.path)} missing"


def test_every_group_and_option_is_listed(generated):
    for path in YAML_FILES:
        if path.parent.name != "conf":
            assert f"`{path.stem}`" in generated.split("### Run-level keys")[0]


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


# --- the comment parser and the choice extraction ----------------------------------------------------------

SAMPLE = """\
# @package _global_
# The file's header,
# on two lines.
defaults:
  - base_schema  # typed schema
  - override /env: frozenlake  # why this env
  - _self_

# Above a key,
# on two lines.
name: frozenlake
url: "http://x#y"  # after a quoted value with a hash
empty:  # null, with a comment
optimizer:  # a container
  lr: 0.001  # the rate
  # above a nested key
  nested: [a, b]  # a flow list
text: |  # a block scalar
  line one
classes:  # a list of mappings
  - _target_: get_class  # first key of an item
    path: some.Class
  - plain item
no_comment: 1

separated: 2
"""


def test_parser_reads_both_comment_styles_and_the_header():
    parsed = parse(SAMPLE)
    c = {dotted(k): v for k, v in parsed.comments().items()}
    assert parsed.header == "The file's header, on two lines."
    assert parsed.package == "_global_"
    assert (
        c["defaults[0]"] == "typed schema" and c["defaults[1]"] == "why this env" and c["defaults[2]"] == ""
    )
    assert c["name"] == "Above a key, on two lines."
    assert c["url"] == "after a quoted value with a hash"
    assert c["empty"] == "null, with a comment"
    assert c["optimizer"] == "a container" and c["optimizer.lr"] == "the rate"
    assert c["optimizer.nested"] == "above a nested key a flow list"
    assert c["text"] == "a block scalar"
    assert c["classes"] == "a list of mappings" and c["classes[0]._target_"] == "first key of an item"
    assert c["classes[0].path"] == "" and c["no_comment"] == "" and c["separated"] == ""
    values = {dotted(e.path): e.value for e in parsed.entries}
    assert (
        values["url"] == "http://x#y" and values["empty"] is None and values["optimizer.nested"] == ["a", "b"]
    )


def test_missing_comments_rules():
    parsed = parse(SAMPLE)
    as_global = {dotted(k) for k in missing_comments(parsed)}
    assert as_global == {"classes[0].path", "no_comment", "separated"}  # containers open paths here
    parsed.package = None
    assert {dotted(k) for k in missing_comments(parsed)} == as_global  # every container here has a comment
    bare = parse("group:\n  key: 1  # c\n")
    assert [dotted(k) for k in missing_comments(bare)] == ["group"]
    assert missing_comments(bare, root_config=True) == []


@pytest.mark.parametrize(
    ("comment", "default", "expected"),
    [
        (
            "mean_norm (x - mean) | mean_std_norm ((x - mean)/(std + eps)); default mean_norm",
            "mean_norm",
            ["mean_norm", "mean_std_norm"],
        ),
        (
            "Lightning precision: 32-true | bf16-mixed | bf16-true",
            "32-true",
            ["32-true", "bf16-mixed", "bf16-true"],
        ),
        (
            "KL default: false = KL loss term (gigpo default) | true = KL in the reward",
            False,
            ["false", "true"],
        ),
        ("raw (mean 0, std 1: the raw score) | zero; for a group of one", "raw", ["raw", "zero"]),
        ("null = exact anchor ids | a difflib ratio in (0, 1)", None, None),
        ("modules to adapt: all-linear | a list, e.g. [q_proj, v_proj]", "all-linear", None),
        ("cpu | gpu", "tpu", None),
        ("no alternatives here", "x", None),
    ],
)
def test_comment_choices(comment, default, expected):
    assert comment_choices(comment, default) == expected
