"""experiments/zero_shot.py's chunked evaluation: played in chunks, stopped after one and resumed from the saved
row, it gives the per-episode table and the metrics of the lab's own evaluation played in one go; a saved row
is resumed only when it was made with the same settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gigpo_lab.config_paths import compose_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import zero_shot  # noqa: E402


class Stopped(Exception):
    pass


def test_a_stopped_chunked_evaluation_resumes_to_the_one_pass_numbers(tiny_overrides):
    from gigpo_lab.train import build

    # holes beside the start: a sampled move into one ends the episode, so the episodes differ
    cfg = compose_config(
        [
            *tiny_overrides,
            "env.desc=[SH,FG]",
            "env.max_turns=12",
            "rollout.eval_episodes=9",
            "rollout.eval_temperature=1.0",
        ]
    )
    module = build(cfg)
    oracle = module.evaluate()  # the lab's evaluation: 9 episodes in one batch

    saves = []

    def stop_after_first(row):
        saves.append(json.loads(json.dumps(row)))  # the row as save() writes it
        raise Stopped

    row: dict = {}
    with pytest.raises(Stopped):
        zero_shot.play_in_chunks(module, row, 9, 4, stop_after_first)
    assert len(saves[0]["eval_table"]) == 4

    resumed = json.loads(json.dumps(saves[0]))  # the row read back from the file
    counts = []
    metrics = zero_shot.play_in_chunks(module, resumed, 9, 4, lambda r: counts.append(len(r["eval_table"])))
    assert counts == [8, 9]  # only the missing episodes were played
    lengths = {r[zero_shot.COLUMNS.index("length")] for r in resumed["eval_table"]}
    assert len(lengths) > 1, "episodes that differ"
    for key in ("eval/success_rate", "eval/return", "eval/length", "eval/revisit_rate", "eval/env_errors"):
        assert metrics[key] == pytest.approx(oracle[key], abs=1e-12), key
    assert resumed["time/eval_s"] > saves[0]["time/eval_s"]


def test_a_row_is_resumed_only_with_the_same_settings(tmp_path):
    out = tmp_path / "rows.json"
    args = [
        "env=twx_cookingworld",
        "seed=1",
        "rollout.eval_episodes=64",
        "lightning.num_threads=1",
        "tracking.uri=sqlite:////a/mlflow.db",
        "output_dir=/a",
    ]
    zero_shot.save({"benchmark": "twx_cookingworld", "overrides": args, "eval_table": [[0.0] * 5]}, out)
    moved = [*args[:3], "lightning.num_threads=2", "tracking.uri=sqlite:////b/mlflow.db", "output_dir=/b"]
    assert zero_shot.earlier_row("twx_cookingworld", moved, out)["eval_table"] == [[0.0] * 5]
    other = ["env=twx_cookingworld", "seed=2", *args[2:]]
    assert zero_shot.earlier_row("twx_cookingworld", other, out) is None
    assert zero_shot.earlier_row("scienceworld", args, out) is None
