"""``gigpo-lab compare``'s paired contrasts end to end: a real sqlite MLflow store whose runs this module logs
(a sweep parent and 17 finished children of three estimators, with values chosen so that every paired number
can be worked out by hand), read by the console script; and the pairing rules on hand-made records.

The finals (``eval/final``) per seed:

    seed     0    1    2    3    4    5    7
    gigpo   0.9  0.8  0.7  1.0  0.6  0.9   -
    grpo    0.5  0.6  0.6  0.7  0.2  0.8   -
    rloo    0.9  0.5  0.8  0.6  0.6   -   0.4

- gigpo vs grpo, seeds 0-5: d = (0.4, 0.2, 0.1, 0.3, 0.4, 0.1), mean 1.5 / 6 = 0.25, P = 1; every d > 0, so
  of the 2^6 sign vectors only all-+ and all-− reach |1.5|: p = 2/64 = 0.03125 (exact).
- gigpo vs rloo, seeds 0-4 (5 in gigpo only, 7 in rloo only): d = (0, 0.3, −0.1, 0.4, 0), mean 0.6 / 5 = 0.12,
  P = (½ + 1 + 0 + 1 + ½) / 5 = 0.6; the non-zero (0.3, −0.1, 0.4) reach |0.6| in 4 of 8 sign vectors, p = 0.5.
- Holm over the two: 0.03125 · 2 = 0.0625 and max(0.0625, 0.5 · 1) = 0.5.

``eval/success_rate`` is logged too, with other values (1 − final): the default metric must be ``eval/final``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from gigpo_lab.analysis import paired
from gigpo_lab.analysis.compare import main as compare_main
from gigpo_lab.analysis.configs import group_configs
from gigpo_lab.analysis.contrasts import ContrastSpec, paired_family
from gigpo_lab.analysis.summary import summarize
from tests.analysis.test_compare import BIN, _env, _record

EXPERIMENT, SWEEP_ID = "paired-e2e", "paired-sweep"
FINALS = {
    "gigpo": {0: 0.9, 1: 0.8, 2: 0.7, 3: 1.0, 4: 0.6, 5: 0.9},
    "grpo": {0: 0.5, 1: 0.6, 2: 0.6, 3: 0.7, 4: 0.2, 5: 0.8},
    "rloo": {0: 0.9, 1: 0.5, 2: 0.8, 3: 0.6, 4: 0.6, 7: 0.4},
}


def _log_run(
    client: MlflowClient, experiment_id: str, parent_id: str, estimator: str, seed: int, final: float
):
    """One finished child run as a sweep job logs it: tags, flattened params, three evaluations."""
    tags = {
        "mlflow.parentRunId": parent_id,
        "sweep_id": SWEEP_ID,
        "estimator": estimator,
        "seed": str(seed),
        "env": "frozenlake",
        "model": "tiny",
    }
    params = {
        "seed": str(seed),
        "estimator._target_": f"gigpo_lab.algorithm.{estimator}",
        "env.name": "frozenlake",
    }
    if estimator == "gigpo":
        tags["step_advantage_weight"] = params["estimator.step_advantage_weight"] = "1.0"
    run = client.create_run(experiment_id, tags=tags, run_name=f"{estimator}-{seed}")
    metrics = [
        Metric(key, value, 1_700_000_000_000 + step, step)
        for step in range(3)
        for key, value in (
            ("eval/final", final if step == 2 else final / 2),
            ("eval/success_rate", 1.0 - final),
            ("eval/env_steps_total", 1000.0 * step),
        )
    ]
    metrics.append(Metric("rollout/env_steps_total", 2000.0, 1_700_000_000_000, 2))
    client.log_batch(run.info.run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run.info.run_id, "FINISHED")


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_store) -> tuple[str, str]:
    """The store: one sweep parent, its children from FINALS. Returns (uri, parent run id)."""
    path = tmp_path_factory.mktemp("paired") / "mlflow.db"
    shutil.copyfile(empty_mlflow_store, path)
    uri = f"sqlite:///{path}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment(EXPERIMENT)
    parent = client.create_run(
        experiment_id, tags={"gigpo_lab.role": "sweep-parent", "sweep_id": SWEEP_ID}, run_name=SWEEP_ID
    )
    for estimator, finals in FINALS.items():
        for seed, final in finals.items():
            _log_run(client, experiment_id, parent.info.run_id, estimator, seed, final)
    client.set_terminated(parent.info.run_id, "FINISHED")
    return uri, parent.info.run_id


def test_gigpo_lab_compare_reports_the_paired_family(store, tmp_path):
    """Through the console script, default metric and resamples: the hand-worked numbers in the terminal table,
    the Markdown and the per-seed JSON, which re-derives every paired number; artifacts on the parent run."""
    uri, parent_id = store
    out_dir = tmp_path / "report"
    cmd = [str(BIN / "gigpo-lab"), "compare", "--store", uri, "--out", str(out_dir)]
    cmd += ["--contrast", "gigpo:grpo", "--contrast", "gigpo:rloo", "--family", "primary"]
    out = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "eval/final" in out.stdout and "family 'primary' (Holm over 2)" in out.stdout
    assert "50,000" in out.stdout and "Monte-Carlo error" in out.stdout
    assert "seeds in one arm only" in out.stdout and "gigpo ω=1: 5; rloo: 7" in out.stdout
    md = (out_dir / "compare-eval_final.md").read_text()
    assert "## Paired contrasts: family 'primary'" in md
    assert "| gigpo ω=1 vs grpo | 6 | 0.250 [" in md and "| 0.0312 | 0.0625 |" in md
    assert "| gigpo ω=1 vs rloo | 5 | 0.120 [" in md and "| 0.5 | 0.5 |" in md

    record = json.loads((out_dir / "per_seed-eval_final.json").read_text())
    assert record["metric"] == "eval/final"
    arms = {arm["label"]: {int(s["seed"]): s["value"] for s in arm["seeds"]} for arm in record["arms"]}
    assert arms == {"gigpo ω=1": FINALS["gigpo"], "grpo": FINALS["grpo"], "rloo": FINALS["rloo"]}
    family = record["family"]
    assert (family["name"], family["resamples"], family["bootstrap_seed"]) == ("primary", 50_000, 0)
    first, second = family["contrasts"]
    assert first["seeds"] == ["0", "1", "2", "3", "4", "5"] and second["seeds"] == ["0", "1", "2", "3", "4"]
    assert first["differences"] == pytest.approx([0.4, 0.2, 0.1, 0.3, 0.4, 0.1])
    assert second["differences"] == pytest.approx([0.0, 0.3, -0.1, 0.4, 0.0])
    assert (second["only_a"], second["only_b"]) == (["5"], ["7"])
    assert first["mean_difference"]["value"] == pytest.approx(0.25) and first["p_improvement"]["value"] == 1.0
    assert (
        second["mean_difference"]["value"] == pytest.approx(0.12) and second["p_improvement"]["value"] == 0.6
    )
    assert (first["p_value"], first["exact"], second["p_value"]) == (0.03125, True, 0.5)
    assert (first["p_holm"], second["p_holm"]) == (0.0625, 0.5)
    assert first["p_improvement"]["low"] == first["p_improvement"]["high"] == 1.0  # every seed improved
    for c in family["contrasts"]:  # the JSON alone re-derives each contrast
        again = paired.paired_contrast(
            np.array(c["a_values"]),
            np.array(c["b_values"]),
            resamples=family["resamples"],
            rng=np.random.default_rng(family["bootstrap_seed"]),
        )
        assert (again.mean_low, again.mean_high) == (
            c["mean_difference"]["low"],
            c["mean_difference"]["high"],
        )
        assert again.d_z == pytest.approx(c["d_z"]) and again.p_value == c["p_value"]

    logged = {Path(a.path).name for a in MlflowClient(tracking_uri=uri).list_artifacts(parent_id, "compare")}
    assert {"compare-eval_final.md", "per_seed-eval_final.json"} <= logged


def test_without_contrasts_the_family_is_every_configuration_vs_the_baseline(store, tmp_path):
    """In-process, with 2,000 resamples and another metric: the default family, its Monte-Carlo error printed."""
    uri, _ = store
    shown = io.StringIO()
    with redirect_stdout(shown):
        code = compare_main(
            ["--store", uri, "--out", str(tmp_path), "--resamples", "2000", "--metric", "eval/success_rate"]
        )
    assert code == 0
    record = json.loads((tmp_path / "per_seed-eval_success_rate.json").read_text())
    family = record["family"]
    assert family["name"] == "every configuration vs 'grpo'" and family["resamples"] == 2000
    assert [c["label"] for c in family["contrasts"]] == ["gigpo ω=1 vs grpo", "rloo vs grpo"]
    # success_rate = 1 - final, so gigpo's paired difference against grpo is -0.25 on this metric
    assert family["contrasts"][0]["mean_difference"]["value"] == pytest.approx(-0.25)
    assert "2,000 resamples" in shown.getvalue()
    tables = [line for line in shown.getvalue().splitlines() if not line.startswith(("comparing", "wrote"))]
    assert max(len(line) for line in tables) <= 100  # the paired table fits the terminal table's width


def test_bad_contrasts_say_what_is_wrong(store, tmp_path):
    uri, _ = store
    for argv, message in (
        (["--contrast", "gigpo"], "expected A:B"),
        (["--contrast", "gigpo:ppo"], "no env has a configuration matching each side"),
        (["--contrast", "grpo:grpo"], "both sides name the same configuration"),
        (["--resamples", "10"], "use at least 100"),
    ):
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stderr", err)
            assert compare_main(["--store", uri, "--out", str(tmp_path), *argv]) == 1
        assert message in err.getvalue(), (argv, err.getvalue())


def test_arms_scored_on_other_evaluation_episodes_are_not_paired():
    """Hand-made records, 3 seeds each: gigpo and grpo on 128 evaluation episodes, grpo again on 64. gigpo pairs
    with the grpo of its own episodes; against the other grpo a note says why there are no pairs."""
    records = []
    for estimator, episodes in (("gigpo", "128"), ("grpo", "128"), ("grpo", "64")):
        for seed in range(3):
            name = f"{estimator}{episodes}-{seed}"
            rec = _record(name, seed, estimator=estimator, **{"rollout.eval_episodes": episodes})
            rec.final = {"eval/success_rate": 0.5 + 0.1 * seed + (0.2 if estimator == "gigpo" else 0.0)}
            records.append(rec)
    configs, _ = group_configs(records)
    summary = summarize(configs, "eval/success_rate", baseline="grpo rollout.eval_episodes=128")
    specs = [ContrastSpec.parse(f"gigpo:grpo rollout.eval_episodes={n}") for n in (128, 64)]
    family = paired_family(summary, specs, resamples=1000)
    (contrast,) = family.contrasts
    assert contrast.label == "gigpo ω=1 rollout.eval_episodes=128 vs grpo rollout.eval_episodes=128"
    assert contrast.result.differences == pytest.approx([0.2, 0.2, 0.2]) and contrast.p_holm == 0.25
    assert family.notes == [
        "gigpo ω=1 rollout.eval_episodes=128 vs grpo rollout.eval_episodes=64: not paired, the evaluation "
        "episodes differ (rollout.eval_episodes)"
    ]
