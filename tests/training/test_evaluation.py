"""Sampled evaluation and the run's primary metrics, ``eval/final`` and ``eval/auc``
(``gigpo_lab/training/evaluation.py``), against an independent oracle and in a real run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gigpo_lab.training.evaluation import EvalCurve
from gigpo_lab.training.schema import TrainerConfig


def _oracle(steps: list[float], success: list[float]) -> tuple[float, float]:
    """From the definitions: the mean of the last three values; numpy's trapezoid over the span."""
    final = float(np.mean(success[-3:]))
    span = steps[-1] - steps[0]
    auc = float(np.trapezoid(success, steps) / span) if span > 0 else success[-1]
    return final, auc


def test_a_hand_computed_curve():
    curve = EvalCurve()
    points = [(0, 0.0), (1000, 0.5), (3000, 1.0), (4000, 0.5)]
    out = [curve.add(x, y) for x, y in points]
    # areas: 1000*0.25 + 2000*0.75 + 1000*0.75 = 250 + 1500 + 750 = 2500 over 4000 steps
    assert out[-1] == {"eval/final": pytest.approx(2.0 / 3.0), "eval/auc": pytest.approx(0.625)}
    assert out[0] == {"eval/final": 0.0, "eval/auc": 0.0}
    assert TrainerConfig.final_window == 3


@given(
    st.lists(
        st.tuples(st.integers(0, 5000), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=20,
    )
)
def test_the_curve_matches_the_oracle_and_stays_in_the_unit_interval(increments):
    curve, steps, success = EvalCurve(), [], []
    total = 0
    for gap, y in increments:
        total += gap
        if steps and steps[-1] == total:  # the same env steps again: that evaluation is replaced
            steps.pop()
            success.pop()
        steps.append(float(total))
        success.append(y)
        out = curve.add(total, y)
    final, auc = _oracle(steps, success)
    assert out["eval/final"] == pytest.approx(final, abs=1e-12)
    assert out["eval/auc"] == pytest.approx(auc, abs=1e-12)
    assert 0.0 <= out["eval/auc"] <= 1.0 + 1e-12


@given(st.floats(0.0, 1.0), st.lists(st.integers(1, 1000), min_size=1, max_size=10))
def test_a_constant_curve_has_that_value_as_its_area(level, gaps):
    curve, x = EvalCurve(), 0
    curve.add(0, level)
    for gap in gaps:
        x += gap
        out = curve.add(x, level)
    assert out["eval/auc"] == pytest.approx(level) and out["eval/final"] == pytest.approx(level)


def test_the_curve_survives_a_checkpoint():
    curve = EvalCurve()
    for x, y in [(0, 0.1), (10, 0.3), (30, 0.2)]:
        curve.add(x, y)
    restored = EvalCurve()
    restored.load(torch.load(_saved(curve.state()), weights_only=True))
    assert restored.add(40, 0.9) == curve.add(40, 0.9)


def _saved(state: dict):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_a_real_run_logs_sampled_and_greedy_success_and_the_primary_metrics(tmp_path):
    """A real two-iteration run: every evaluation logs the sampled rate over the configured episodes, the greedy
    rate beside it, and eval/final and eval/auc recomputed here from the logged curve."""
    from mlflow.tracking import MlflowClient
    from tiny_sizes import TINY

    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import train

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [*TINY, "rollout.eval_episodes=8", "rollout.eval_greedy_episodes=2"]
    cfg = compose_config([*overrides, f"output_dir={tmp_path / 'run'}", f"tracking.uri={store}"])
    assert (cfg.rollout.eval_greedy, cfg.rollout.eval_temperature) == (False, 0.4)  # the defaults
    train(cfg)
    client = MlflowClient(store)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])

    def history(key: str) -> list[float]:
        return [
            m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
        ]

    success, steps = history("eval/success_rate"), history("eval/env_steps_total")
    assert len(success) == 3 and steps[0] == 0.0  # before the first update, after each of the two
    assert all(v * 8 == round(v * 8) for v in success)  # a rate over 8 sampled episodes
    assert all(v in (0.0, 0.5, 1.0) for v in history("eval/greedy_success_rate"))  # over 2 greedy ones
    final, auc = _oracle(steps, success)
    assert history("eval/final")[-1] == pytest.approx(final)
    assert history("eval/auc")[-1] == pytest.approx(auc)


def test_a_bad_eval_temperature_fails_at_compose_time():
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.training.config_checks import ConfigError, validate_config

    with pytest.raises(
        ConfigError, match=r"rollout.eval_temperature=0.0 is not allowed; set .* in \(0.0, inf\)"
    ):
        validate_config(compose_config(["rollout.eval_temperature=0"]))


def test_an_evaluation_at_the_same_env_steps_replaces_the_last_point():
    """A resume from a mid-iteration checkpoint, or a finished run extended, evaluates the same weights at the
    same env steps again: the point is replaced, never counted twice by eval/final."""
    curve = EvalCurve()
    for x, y in [(0, 0.0), (100, 0.5), (200, 1.0)]:
        curve.add(x, y)
    out = curve.add(200, 0.9)
    assert curve.steps == [0.0, 100.0, 200.0] and curve.success == [0.0, 0.5, 0.9]
    assert out["eval/final"] == pytest.approx((0.0 + 0.5 + 0.9) / 3)


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.integers(1, 5),
)
def test_final_averages_the_last_window_evaluations(success, window):
    curve = EvalCurve(window)
    for step, value in enumerate(success):
        out = curve.add(1000 * step, value)
    assert out["eval/final"] == pytest.approx(float(np.mean(success[-window:])))


def test_the_window_is_the_trainer_key(tiny_overrides, tmp_path):
    """trainer.final_window reaches the module's curve (1: eval/final is the last evaluation alone)."""
    from real_runs import run_cfg

    from gigpo_lab.train import build

    module = build(run_cfg(tiny_overrides, tmp_path, "w1", "trainer.final_window=1"))
    assert module.eval_curve.window == 1
    module.eval_curve.add(0, 0.0)
    assert module.eval_curve.add(100, 1.0)["eval/final"] == 1.0


def test_without_the_start_evaluation_the_run_trains_the_same(tiny_overrides, tmp_path):
    """trainer.eval_at_start=false drops the evaluation before the first update and nothing else: the same
    rollouts, the same weights at the end, the same evaluation after the last iteration."""
    from real_runs import history, policy_state, run_cfg

    from gigpo_lab.train import train

    loop = ("trainer.iterations=1", "trainer.eval_every=1", "trainer.final_window=1")
    with_start = train(run_cfg(tiny_overrides, tmp_path, "on", *loop, "trainer.eval_at_start=true"))
    without = train(run_cfg(tiny_overrides, tmp_path, "off", *loop, "trainer.eval_at_start=false"))
    on, off = f"sqlite:///{tmp_path / 'on'}.db", f"sqlite:///{tmp_path / 'off'}.db"
    assert [s for s, _ in history(on, "eval/success_rate")] == [0, 1]
    assert history(off, "eval/success_rate") == history(on, "eval/success_rate")[1:]
    assert history(off, "rollout/return") == history(on, "rollout/return")
    assert without["eval/final"] == with_start["eval/final"]
    a, b = (
        policy_state(tmp_path / "on/checkpoints/last.ckpt"),
        policy_state(tmp_path / "off/checkpoints/last.ckpt"),
    )
    assert all(bool((a[k] == b[k]).all()) for k in a)
