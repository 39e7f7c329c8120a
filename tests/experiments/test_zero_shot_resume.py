"""experiments/zero_shot.py's chunked evaluation: stopped after a chunk and run again, it plays only the missing
episodes and ends with the table, row for row, and the metrics of the lab's own evaluation in one batch; a row
of other settings, or one from before the chunks, is refused rather than overwritten; the lab's limit on env
errors holds for the whole evaluation, not for each chunk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from gigpo_lab.config_paths import compose_config
from gigpo_lab.rollout.collector import EnvFailure
from gigpo_lab.training.seeds import EVAL_SEED_BASE, eval_seeds, eval_stream_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import zero_shot  # noqa: E402

# slippery moves drawn from the reset seed's generator and commands from the episode's stream, with holes beside
# the start: an episode played with another episode's seed or stream shows in its row
MAPS = [
    "env.desc=[SH,FG]",
    "env.is_slippery=true",
    "env.max_turns=12",
    "rollout.eval_temperature=1.0",
    "rollout.eval_greedy_episodes=0",
]


class Stopped(Exception):
    pass


def one_batch(module, episodes: int) -> torch.Tensor:
    """The oracle: the lab's evaluation (``training/evaluation.py``'s seeds and streams), every episode at once."""
    streams = [torch.Generator().manual_seed(eval_stream_seed(module.seed, i)) for i in range(episodes)]
    return module.collector.held_out(eval_seeds(episodes), streams, greedy=False, temperature=1.0)


def test_a_stopped_chunked_evaluation_resumes_to_the_one_batch_table(tiny_overrides):
    from gigpo_lab.train import build

    module = build(compose_config([*tiny_overrides, *MAPS, "rollout.eval_episodes=9"]))
    full = one_batch(module, 9)
    oracle = module.evaluate()
    assert len(set(full[:, zero_shot.COLUMNS.index("length")].tolist())) > 1, "episodes that differ"

    saves = []

    def stop_after_first(row):
        saves.append(json.loads(json.dumps(row)))  # the row as save() writes it
        raise Stopped

    with pytest.raises(Stopped):
        zero_shot.play_in_chunks(module, {}, 9, 4, stop_after_first)
    resumed = json.loads(json.dumps(saves[0]))  # the row read back from the file
    assert len(resumed["eval_table"]) == 4
    counts = []
    metrics = zero_shot.play_in_chunks(module, resumed, 9, 4, lambda r: counts.append(len(r["eval_table"])))
    assert counts == [8, 9]  # only the missing episodes were played
    assert torch.equal(torch.tensor(resumed["eval_table"], dtype=torch.float64), full)
    for key in ("eval/success_rate", "eval/return", "eval/length", "eval/revisit_rate", "eval/env_errors"):
        assert metrics[key] == oracle[key], key


def test_the_env_error_limit_holds_for_the_whole_evaluation_not_each_chunk(tiny_overrides):
    from gigpo_lab.train import build

    faulty = [
        "env._target_=tests.tracking.faulty_env.make_faulty_env",
        "+env.fault=raise",
        f"+env.fault_seeds=[{EVAL_SEED_BASE + 1}]",
    ]
    module = build(compose_config([*tiny_overrides, *MAPS, *faulty, "rollout.max_env_error_rate=0.2"]))
    row: dict = {}
    metrics = zero_shot.play_in_chunks(
        module, row, 9, 4, lambda r: None
    )  # 1 of 4 in its chunk, 1 of 9 in all
    assert (
        metrics["eval/env_errors"] == 1.0 and row["eval_table"][1][zero_shot.COLUMNS.index("failed")] == 1.0
    )
    assert module.collector.max_env_error_rate == 0.2  # the limit is back
    # 1 of 4 in all: over 0.2, raised once every chunk is played and saved
    with pytest.raises(EnvFailure, match="1 of 4 evaluation episodes failed"):
        zero_shot.play_in_chunks(module, {}, 4, 2, lambda r: None)


def test_zero_shot_stopped_resumed_and_run_again(tiny_overrides, tmp_path, monkeypatch):
    """The whole script on the tiny policy: stopped after its first save, run again to the end (the rollout and
    GiGPO's metrics), then once more, which plays nothing."""
    out = tmp_path / "rows.json"
    args = dict(
        benchmark="frozenlake",
        episodes=6,
        overrides=[*tiny_overrides, *MAPS, "rollout.eval_episodes=6"],  # after TINY's 2
        out=out,
        seed=3,
        chunk=4,
        policy=["estimator=gigpo"],
    )
    real_save = zero_shot.save

    def save_then_stop(row, path):
        real_save(row, path)
        raise Stopped

    monkeypatch.setattr(zero_shot, "save", save_then_stop)
    with pytest.raises(Stopped):
        zero_shot.zero_shot(**args)
    monkeypatch.setattr(zero_shot, "save", real_save)
    assert len(json.loads(out.read_text())[0]["eval_table"]) == 4

    row = zero_shot.zero_shot(**args)
    from gigpo_lab.train import build

    cfg = compose_config(
        ["env=frozenlake", "seed=3", "estimator=gigpo", "rollout.eval_episodes=6", *tiny_overrides, *MAPS]
    )
    assert torch.equal(torch.tensor(row["eval_table"], dtype=torch.float64), one_batch(build(cfg), 6))
    assert "adv/singleton_frac" in row and row["rollout/episodes"] == 4.0  # 2 groups x 2
    assert row["commits"] == [zero_shot.commit()] and row["rollout_commit"] == zero_shot.commit()
    assert zero_shot.zero_shot(**args) == row  # done: nothing is played again
    assert torch.is_grad_enabled()  # the caller's grad mode is left as it was
    assert json.loads(out.read_text()) == [row]


def test_a_row_of_other_settings_or_without_a_table_is_refused_not_replaced(tmp_path):
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
    assert zero_shot.row_to_resume("twx_cookingworld", moved, out)["eval_table"] == [[0.0] * 5]
    other = ["env=twx_cookingworld", "seed=2", *args[2:]]
    with pytest.raises(zero_shot.RowConflict, match="other settings.*--fresh"):
        zero_shot.row_to_resume("twx_cookingworld", other, out)
    assert zero_shot.row_to_resume("twx_cookingworld", other, out, fresh=True)["eval_table"] == []
    assert zero_shot.row_to_resume("scienceworld", args, out)["eval_table"] == []  # no row yet: a new one
    zero_shot.save({"benchmark": "twx_coin", "overrides": ["env=twx_coin"], "eval/success_rate": 0.03}, out)
    with pytest.raises(zero_shot.RowConflict, match="no per-episode table.*--fresh"):
        zero_shot.row_to_resume("twx_coin", ["env=twx_coin"], out)
