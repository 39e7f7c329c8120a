"""``gigpo-lab study`` end to end with real runs (real Lightning ``Trainer`` runs, a real MLflow store): a
study whose two arms are one config ends with every pair equal and nothing reproduced (slow: two multiruns,
about 35 s); a crippled arm (a learning rate of 0) against the default ends "reproduced" for the default (slow:
6 seeds, the fewest at which the exact sign-flip test can go below 0.05). In the default suite: one run with
the overrides ``study run`` gives it writes its row and keeps last.ckpt alone."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from tiny_sizes import TINY

from gigpo_lab.config_paths import config_root
from gigpo_lab.study.cli import main


def _spec(tmp_path, **fields) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(fields))
    return str(path)


def test_a_study_run_writes_its_row_at_once_and_is_light(tmp_path):
    """The overrides of one cell's command (``launch.command``), run in-process for one seed."""
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.study.launch import command
    from gigpo_lab.study.spec import load_spec
    from gigpo_lab.train import train

    spec = _spec(
        tmp_path, name="one", question="q", settings={"lake": TINY}, arms={"a": [], "b": ["estimator=grpo"]},
        seeds={"start": 0, "stop": 2}, pilot_seeds={"start": 10, "stop": 12}, metric="eval_final", delta=0.1,
        delta_reason="r", families=[{"name": "f", "settings": ["lake"], "contrasts": [{"name": "H", "a": "a", "b": "b"}]}],
    )  # fmt: skip
    argv = command(load_spec(spec), "lake", "b", [3], tmp_path / "one", "sqlite:///" + str(tmp_path / "m.db"))
    overrides = [o for o in argv[argv.index("train") + 2 :] if not o.startswith(("hydra.", "resume="))]
    cfg = compose_config([*overrides, f"output_dir={tmp_path / 'out'}"])
    train(cfg)
    row = json.loads((tmp_path / "one" / "runs" / "lake" / "b" / "seed_3.json").read_text())
    assert (row["setting"], row["arm"], row["seed"]) == ("lake", "b", 3)
    assert row["env_steps"] > 0 and row["eval_final"] is not None and row["disk_mb"] > 0
    assert 0 < row["cpu_s"] and row["wall_s"] > 0  # its process's CPU seconds, the plan's price of a run
    assert sorted(p.name for p in (tmp_path / "out").rglob("*.ckpt")) == ["last.ckpt"]


def test_setting_and_arm_keep_only_their_cells_and_a_wrong_name_lists_the_valid_ones(tmp_path, capsys):
    """``study run --setting/--arm/--seed``: two commands on disjoint cells can run side by side; a finished
    seed's run file still counts, and a name (or seed) not in the spec is a one-line error that lists the valid
    ones."""
    spec = _spec(
        tmp_path, name="cells", question="q", settings={"lake": TINY, "pond": TINY},
        arms={"a": [], "b": ["estimator=grpo"], "c": ["estimator=rloo"]}, seeds={"start": 0, "stop": 2},
        pilot_seeds={"start": 10, "stop": 12},
        metric="eval_final", delta=0.1, delta_reason="r",
        families=[{"name": "f", "settings": ["lake", "pond"], "contrasts": [{"name": "H", "a": "a", "b": "b"}]}],
    )  # fmt: skip
    out = tmp_path / "cells"
    done = out / "runs" / "pond" / "b" / "seed_10.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    argv = ["run", spec, "--out", str(out), "--pilot", "--dry-run"]
    assert main([*argv, "--setting", "pond", "--arm", "b"]) == 0
    printed = capsys.readouterr().out
    assert "1 runs to go in 1 cells" in printed and "- pond / b: seeds 11\n" in printed
    assert main([*argv, "--arm", "a"]) == 0
    cells = re.findall(r"^- (\w+) / (\w+): seeds (\S+)$", capsys.readouterr().out, re.M)
    assert cells == [("lake", "a", "10,11"), ("pond", "a", "10,11")]
    assert main([*argv, "--setting", "lake", "--setting", "sea", "--setting", "ocean"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gigpo-lab study run: --setting sea, ocean: not in the spec; choose from lake, pond"], err
    assert main([*argv, "--arm", "c"]) == 2  # an arm of the spec that no contrast reads: no cell
    assert capsys.readouterr().err.strip() == (
        "gigpo-lab study run: --setting/--arm: no cell of the grid is both; its cells: lake/a, lake/b, pond/a, pond/b"
    )
    assert main([*argv, "--seed", "11"]) == 0  # one seed of every cell: a pair (and more) at a time
    cells = re.findall(r"^- (\w+) / (\w+): seeds (\S+)$", capsys.readouterr().out, re.M)
    assert cells == [("lake", "a", "11"), ("lake", "b", "11"), ("pond", "a", "11"), ("pond", "b", "11")]
    assert (
        main([*argv, "--seed", "10", "--seed", "0", "--seed", "3"]) == 2
    )  # confirmatory seeds in a pilot run
    assert capsys.readouterr().err.strip() == (
        "gigpo-lab study run: --seed 0, 3: not a pilot seed of these cells; choose from 10–11"
    )
    assert not (out / "mlflow.db").exists()  # a dry run starts nothing
    (done.parent / "seed_11.json").write_text("{}")
    assert main(["run", spec, "--out", str(out), "--pilot", "--setting", "pond", "--arm", "b"]) == 0
    assert capsys.readouterr().out.strip().endswith("every run of these cells finished")


@pytest.mark.slow
def test_two_spellings_of_one_config_give_equal_pairs_and_no_verdict_of_a_gain(tmp_path, capsys):
    # the default estimator is GiGPO: [] and [estimator=gigpo] compose to the same config
    spec = _spec(
        tmp_path, name="same", question="Is GiGPO equal to itself?",
        settings={"lake": [o for o in TINY if not o.startswith("lightning.num_threads")]},
        arms={"implicit": [], "explicit": ["estimator=gigpo"]},
        seeds={"start": 0, "stop": 2}, pilot_seeds={"start": 10, "stop": 12}, metric="eval_final", delta=0.1,
        delta_reason="Ten points.", overrides=["lightning.num_threads=1"],  # the basic launcher: in-process
        families=[{"name": "f", "settings": ["lake"], "contrasts": [{"name": "H", "a": "implicit", "b": "explicit"}]}],
    )  # fmt: skip
    out = tmp_path / "same"
    assert main(["register", spec]) == 0
    assert main(["run", spec, "--out", str(out)]) == 0
    rows = [json.loads(p.read_text()) for p in sorted((out / "runs").rglob("seed_*.json"))]
    assert [(r["arm"], r["seed"]) for r in rows] == [
        ("explicit", 0),
        ("explicit", 1),
        ("implicit", 0),
        ("implicit", 1),
    ]
    assert all(r["disk_mb"] > 0 and r["wall_s"] > 0 and r["env_steps"] > 0 for r in rows)
    # light runs: last.ckpt alone (TINY checkpoints every iteration, 2 iterations), and no artifact upload
    ckpts = sorted(p.relative_to(out / "outputs").as_posix() for p in (out / "outputs").rglob("*.ckpt"))
    assert ckpts == [
        f"lake/{arm}/seed_{s}/checkpoints/last.ckpt" for arm in ("explicit", "implicit") for s in (0, 1)
    ]
    capsys.readouterr()
    assert main(["run", spec, "--out", str(out)]) == 0  # resumes: nothing to run
    assert "0 runs to go" in capsys.readouterr().out
    assert main(["status", spec, "--out", str(out)]) == 0
    assert re.search(r"\| lake \| implicit \| 2 \| 0 \| 0 \| 0 \|", capsys.readouterr().out)
    assert main(["analyse", spec, "--out", str(out), "--store", str(out / "mlflow.db"), "--quiet"]) == 0
    result = json.loads((out / "report" / "analysis.json").read_text())
    (record,) = result["f/eval_final"]
    assert record["n"] == record["equal"] == 2 and record["mean_difference"] == 0.0
    assert record["verdict"] == "refuted"  # a gain of δ is excluded: the CI is [0, 0]
    # the store's runs carry the study's tags, and read back to the same rows as the run files
    assert json.loads((out / "report" / "rows.json").read_text())[0]["run_id"] == rows[0]["run_id"]


def _tutorial_spec() -> str:
    text = (config_root() / "docs" / "TUTORIAL.md").read_text()
    return text.split("# file: lr_study.yaml\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_a_crippled_arm_makes_the_default_reproduced(tmp_path):
    """The tutorial's own spec (docs/TUTORIAL.md, "Your own study"): the default recipe against lr = 0."""
    (tmp_path / "lr_study.yaml").write_text(_tutorial_spec())
    spec, out = str(tmp_path / "lr_study.yaml"), tmp_path / "lr-zero"
    assert main(["register", spec]) == 0
    assert main(["run", spec, "--out", str(out)]) == 0
    assert main(["analyse", spec, "--out", str(out), "--quiet"]) == 0
    (record,) = json.loads((out / "report" / "analysis.json").read_text())["learning/eval_final"]
    assert record["n"] == 6 and record["verdict"] == "reproduced"
    assert record["p"] == pytest.approx(2 / 2**6)  # every seed ahead: the exact test's floor
