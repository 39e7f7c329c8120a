"""The spec: the registered study's parses, its grid is what its families need, and every mistake is a
one-line error that names the key and the fix."""

from __future__ import annotations

import copy

import pytest
import yaml

from gigpo_lab.study.spec import SpecError, load_spec, parse_spec

RAW = yaml.safe_load(load_spec("gigpo_claims").path.read_text())


def test_the_registered_studys_grid_is_every_cell_its_families_read():
    spec = load_spec("gigpo_claims").spec
    grid = spec.grid()
    # primary: GiGPO, GRPO and RLOO on 3 settings, the placebo on the 2 FrozenLakes; 12 more arms on random
    # maps; the ω grid's 5 on 2 settings (ω = 1 and 0 rerun GiGPO and GRPO there); the LLM check's 2 arms
    assert len(grid) == 11 + 12 + 10 + 2
    assert ("textworld_coin", "gigpo_placebo") not in grid  # H2 is left off TextWorld
    assert grid[("llm_coin", "gigpo")] == [0, 1, 2, 3, 4] and grid[("frozenlake8x8", "omega_2.0")] == list(
        range(60)
    )
    assert sum(map(len, grid.values())) == 33 * 60 + 2 * 5


def _broken(path: list, value=None, delete: bool = False) -> dict:
    raw = copy.deepcopy(RAW)
    node = raw
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "delete", "message"),
    [
        (["metric"], "eval_aux", False, r"spec\.metric: 'eval_aux' is not one of eval_final, eval_auc"),
        (["delta"], None, True, r"spec\.delta: missing; add it \(The smallest effect worth detecting"),
        (["delta"], -0.1, False, r"spec\.delta: -0\.1 must be > 0"),
        (["alpha"], 1.5, False, r"spec\.alpha: 1\.5 must lie in \(0, 1\)"),
        (["seeds"], {"start": 0, "stop": 1}, False, r"spec\.seeds: stop - start = 1"),
        (
            ["pilot_seeds"],
            {"start": 50, "stop": 70},
            False,
            r"spec\.pilot_seeds: overlaps seeds; pick a disjoint",
        ),
        (
            ["families", 0, "seeds"],
            {"start": 100, "stop": 130},
            False,
            r"spec\.pilot_seeds: overlaps families\.\w+\.seeds",
        ),
        (
            ["families", 0, "contrasts", 0, "a"],
            "gigpoo",
            False,
            r"contrasts\[0\]\.a: 'gigpoo' is not one of gigpo, grpo",
        ),
        (
            ["families", 0, "settings"],
            ["sokoban"],
            False,
            r"families\[0\]\.settings: 'sokoban' is not one of",
        ),
        (
            ["families", 0, "color"],
            "red",
            False,
            r"families\[0\]\.color: unknown key; valid keys: name, settings",
        ),
        (
            ["families", 0, "metric"],
            "eval_final",
            False,
            r"a confirmatory family is judged on the primary metric",
        ),
        (["verdict"], "vote", False, r"spec\.verdict: 'vote' is not one of delta"),
        (
            ["analysis", "stream"],
            "global",
            False,
            r"spec\.analysis\.stream: 'global' is not one of family, contrast",
        ),
        (["same_runs", 0, "copy"], "omega_9", False, r"same_runs\[0\]\.copy: 'omega_9' is not one of"),
        (["arms", "gigpo"], 3, False, r"spec\.arms\.gigpo: expected list, got 3"),
        (["name"], "my study!", False, r"spec\.name: 'my study!'; use letters, digits"),
    ],
)
def test_a_mistake_is_one_line_that_names_the_key_and_the_fix(path, value, delete, message):
    with pytest.raises(SpecError, match=message) as caught:
        parse_spec(_broken(path, value, delete))
    assert "\n" not in str(caught.value)


def test_a_contrast_with_an_arm_on_both_sides_is_refused():
    raw = _broken(["families", 1, "contrasts", 0, "b"], ["omega_0.0", "omega_0.5"])
    with pytest.raises(SpecError, match=r"arm\(s\) omega_0\.5 on both sides"):
        parse_spec(raw)


def test_an_unknown_spec_name_lists_the_labs_specs(tmp_path):
    with pytest.raises(SpecError, match="nope: no such spec file; .* gigpo_claims"):
        load_spec("nope")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: not valid YAML at line 2"):
        load_spec(str(tmp_path / "bad.yaml"))


def test_the_hash_ignores_comments_and_layout_but_not_content(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("# a comment\n" + yaml.safe_dump(RAW))
    b.write_text(yaml.safe_dump(RAW, default_flow_style=True))
    assert load_spec(str(a)).hash == load_spec(str(b)).hash
    b.write_text(yaml.safe_dump(_broken(["delta"], 0.2)))
    assert load_spec(str(a)).hash != load_spec(str(b)).hash


@pytest.mark.parametrize(
    ("family", "message"),
    [
        ({"delta": 0.2}, r"families\[0\]\.delta_reason: required with delta"),
        ({"delta": -0.2, "delta_reason": "x"}, r"families\[0\]\.delta: -0\.2 must be > 0"),
        ({"delta_reason": "x"}, r"families\[0\]\.delta_reason: given without delta"),
        ({"delta": 0.2, "delta_reason": "x", "confirmatory": False}, r"a reported family has no verdicts"),
    ],
)
def test_a_familys_own_delta_needs_its_reason_and_a_confirmatory_family(family, message):
    raw = copy.deepcopy(RAW)
    raw["families"][0].update(family)
    with pytest.raises(SpecError, match=message):
        parse_spec(raw)


def test_a_familys_own_delta_is_what_its_verdicts_and_its_registration_use():
    from pathlib import Path

    from gigpo_lab.study.registration_text import render
    from gigpo_lab.study.spec import LoadedSpec

    raw = copy.deepcopy(RAW)
    raw["families"][0].update(delta=0.25, delta_reason="60 seeds detect 0.25 at power 0.8 on 8x8's spread.")
    spec = parse_spec(raw)
    primary, omega = spec.families[0], spec.families[1]
    assert spec.family_delta(primary) == 0.25 and spec.family_delta(omega) == spec.delta == 0.10
    assert "**δ = 0.25** for this family's verdicts: 60 seeds detect 0.25" in render(
        LoadedSpec(spec, Path("s.yaml"), raw, "h")
    )


def test_the_confirmatory_seeds_read_per_family_where_a_family_sets_its_own():
    raw = copy.deepcopy(RAW)
    for family in raw["families"]:
        family.pop("seeds", None)
    assert parse_spec(raw).confirmatory_seeds_text() == "0–59"
    raw["families"][0]["seeds"] = {"start": 0, "stop": 24}
    spec = parse_spec(raw)
    first, *rest = [f.name for f in spec.families]
    assert spec.confirmatory_seeds_text() == ", ".join([f"{first} 0–23", *(f"{n} 0–59" for n in rest)])
