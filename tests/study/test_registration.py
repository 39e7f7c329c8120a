"""Registration: the spec's hash, commit and time in a file beside it; a changed spec is refused until the
change is recorded as an amendment, with the confirmatory rows the tool counted; the text is generated."""

from __future__ import annotations

import json

import pytest
import yaml

from gigpo_lab.study.cli import main
from gigpo_lab.study.registration import load
from gigpo_lab.study.registration_text import check_text
from gigpo_lab.study.spec import load_spec

SPEC = {
    "name": "two-arms",
    "question": "Does A beat B?",
    "settings": {"lake": ["trainer.iterations=1"]},
    "arms": {"a": "estimator=gigpo", "b": "estimator=grpo"},
    "seeds": {"start": 0, "stop": 4},
    "pilot_seeds": {"start": 10, "stop": 12},
    "metric": "eval_final",
    "delta": 0.1,
    "delta_reason": "Ten points of held-out success.",
    "families": [{"name": "main", "settings": ["lake"], "contrasts": [{"name": "H1", "a": "a", "b": "b"}]}],
}


def _write(path, **changes):
    path.write_text(yaml.safe_dump(SPEC | changes))
    return str(path)


def test_the_text_gives_the_families_seeds_where_none_uses_the_specs(tmp_path):
    from gigpo_lab.study.registration_text import render

    assert "**Confirmatory seeds** 0–3; **pilot" in render(load_spec(_write(tmp_path / "a.yaml")))
    own = [{**SPEC["families"][0], "seeds": {"start": 20, "stop": 25}}]
    text = render(load_spec(_write(tmp_path / "b.yaml", families=own)))
    assert "**Confirmatory seeds** main 20–24; **pilot" in text and "0–3" not in text


def test_register_then_refuse_a_changed_spec_until_it_is_amended(tmp_path, capsys):
    spec = _write(tmp_path / "s.yaml")
    assert main(["register", spec]) == 0
    registered = load(load_spec(spec))
    assert registered.hash == load_spec(spec).hash and not registered.amendments
    assert check_text(load_spec(spec))  # the generated registration text sits beside it
    assert "δ = 0.1** in `eval_final`'s units. Ten points" in (tmp_path / "s.md").read_text()
    assert main(["register", spec]) == 2  # twice: a change is an amendment
    assert "already registered" in capsys.readouterr().err
    # a changed δ: run and analyse refuse it, with one line that says how to record it
    spec = _write(tmp_path / "s.yaml", delta=0.05)
    assert main(["run", spec, "--dry-run", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "changed since it was registered" in err and "--amend --reason" in err and err.count("\n") == 1
    # two confirmatory rows and a pilot row exist: the amendment counts the confirmatory ones
    for arm, seed in (("a", 0), ("b", 0), ("a", 10)):
        row = tmp_path / "out" / "runs" / "lake" / arm / f"seed_{seed}.json"
        row.parent.mkdir(parents=True, exist_ok=True)
        row.write_text(json.dumps({"setting": "lake", "arm": arm, "seed": seed, "run_id": f"{arm}{seed}",
                                   "eval_final": 0.5}))  # fmt: skip
    assert main(["register", spec, "--amend", "--reason", "δ in eval_final's units."]) == 2
    assert "--seen-confirmatory: missing" in capsys.readouterr().err
    argv = ["register", spec, "--amend", "--reason", "δ in eval_final's units.", "--seen-confirmatory", "no"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    (amendment,) = load(load_spec(spec)).amendments
    assert (amendment.confirmatory_rows, amendment.seen_confirmatory, amendment.hash) == (
        2,
        False,
        load_spec(spec).hash,
    )
    assert main(["run", spec, "--dry-run", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "6 runs to go in 2 cells" in printed and "seeds 1,2,3" in printed  # resumes: seed 0 has its rows
    assert "δ in eval_final's units. Confirmatory results seen: no; confirmatory rows then: 2." in (
        tmp_path / "s.md").read_text()  # fmt: skip


def test_an_unregistered_spec_runs_only_its_pilot(tmp_path, capsys):
    spec = _write(tmp_path / "s.yaml")
    assert main(["run", spec, "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "not registered" in capsys.readouterr().err
    assert main(["run", spec, "--dry-run", "--pilot", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "4 runs to go in 2 cells (pilot)" in out and "seed=10,11" in out
    assert "+tracking.tags.study_arm=a" in out and "trainer.keep_checkpoints=false" in out
    assert "trainer.checkpoint_frozen_base=false" in out


@pytest.mark.parametrize("name", ["gigpo_claims", "gigpo_llm_claims"])
def test_the_registered_studys_text_is_generated_from_its_spec(name):
    assert check_text(load_spec(name)), f"run: gigpo-lab study register {name} --amend ..."
