"""The controls of docs/ALGORITHMS.md section 15 in real training runs (their arithmetic is in
tests/algorithm/test_placebo.py, tests/envs/test_no_repeat.py and tests/algorithm/test_penalty_dose.py)."""

from __future__ import annotations

from real_runs import checkpoint_tensors, history, metric_histories, run_cfg

from gigpo_lab.train import train


def test_under_no_repeat_gigpo_trains_bit_for_bit_as_grpo(tiny_overrides, tmp_path):
    """``env.no_repeat=true``: every step group a singleton, so GiGPO's advantages are GRPO's and the two runs
    are one run: the same metrics at every iteration and the same weights and optimizer state at the end."""
    train(run_cfg(tiny_overrides, tmp_path, "gigpo", "env.no_repeat=true", "estimator=gigpo"))
    train(run_cfg(tiny_overrides, tmp_path, "grpo", "env.no_repeat=true", "estimator=grpo"))
    gigpo, grpo = (metric_histories(f"sqlite:///{tmp_path / n}.db") for n in ("gigpo", "grpo"))
    assert [v for _, v in gigpo["adv/singleton_frac"]] == [1.0, 1.0]
    shared = sorted(set(gigpo) & set(grpo))
    assert "adv/std" in shared and "train/loss" in shared
    assert {k: gigpo[k] for k in shared} == {k: grpo[k] for k in shared}
    assert any(v != 0.0 for _, v in grpo["adv/std"]), "the runs had a signal to train on"
    a = checkpoint_tensors(tmp_path / "gigpo/checkpoints/last.ckpt")
    b = checkpoint_tensors(tmp_path / "grpo/checkpoints/last.ckpt")
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_the_placebo_trains_on_gigpos_batch_with_gigpos_step_group_sizes(tiny_overrides, tmp_path):
    """``estimator.placebo=true``: the first iteration collects GiGPO's batch (same seed, same initial policy)
    and reports its step groups' number, mean size and singleton share; the run finishes."""
    placebo = train(run_cfg(tiny_overrides, tmp_path, "placebo", "estimator.placebo=true"))
    train(run_cfg(tiny_overrides, tmp_path, "gigpo"))
    assert "train/loss" in placebo
    for key in ("rollout/return", "rollout/invalid_rate", "adv/step_groups", "adv/step_group_size"):
        first = [history(f"sqlite:///{tmp_path / n}.db", key)[0] for n in ("placebo", "gigpo")]
        assert first[0] == first[1], key
