"""gigpo's ``estimator.bootstrap_truncated`` in real training runs (the arithmetic is in
tests/algorithm/test_truncation.py)."""

from __future__ import annotations

from real_runs import assert_same_metrics, history, policy_state, run_cfg

from gigpo_lab.train import train


def test_frozenlake_trains_bit_for_bit_as_without_it(tiny_overrides, tmp_path):
    """FrozenLake's cut episodes earn 0 a step (its invalid turns too), so their tail is 0 and nothing moves."""
    on = train(run_cfg(tiny_overrides, tmp_path, "on", "estimator.bootstrap_truncated=true"))
    off = train(run_cfg(tiny_overrides, tmp_path, "off", "estimator.bootstrap_truncated=false"))
    assert_same_metrics(on, off)
    a, b = (
        policy_state(tmp_path / "on/checkpoints/last.ckpt"),
        policy_state(tmp_path / "off/checkpoints/last.ckpt"),
    )
    assert all(bool((a[k] == b[k]).all()) for k in a)


def test_on_cliffwalking_the_step_groups_lose_the_time_of_the_visit(tiny_overrides, tmp_path):
    """CliffWalking's first rollout (every step -1, every episode cut at 30 turns): without the bootstrap the
    step advantages spread by when a state was visited; with it only the invalid penalty (0.1) is left."""
    cliff = (
        "env=cliffwalking",
        "env.max_turns=30",
        "rollout.groups=4",
        "exploration=none",
        "trainer.iterations=1",
    )
    train(run_cfg(tiny_overrides, tmp_path, "on", *cliff, "estimator.bootstrap_truncated=true"))
    train(run_cfg(tiny_overrides, tmp_path, "off", *cliff, "estimator.bootstrap_truncated=false"))
    on, off = f"sqlite:///{tmp_path / 'on'}.db", f"sqlite:///{tmp_path / 'off'}.db"
    assert history(on, "rollout/return") == history(off, "rollout/return"), "the same episodes"
    assert history(on, "rollout/success_rate")[0][1] == 0.0
    spread_on, spread_off = history(on, "adv/step_std")[0][1], history(off, "adv/step_std")[0][1]
    assert spread_off > 1.0 and spread_on < 0.1, (spread_on, spread_off)
