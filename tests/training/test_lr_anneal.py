"""``trainer.lr_anneal``: the learning rate falls linearly towards 0 over the run, in real runs, and a resumed
run anneals exactly as the uninterrupted one (Lightning checkpoints the scheduler)."""

from __future__ import annotations

import pytest
import torch

from gigpo_lab.train import train
from tests.real_runs import history, policy_state, run_cfg

LR = 3e-4  # the schema's default


def _lrs(cfg) -> list[float]:
    return [v for _, v in sorted(history(cfg.tracking.uri, "train/lr"))]


def test_annealed_lr_is_lr_times_one_minus_i_over_iterations(tiny_overrides, tmp_path):
    cfg = run_cfg(tiny_overrides, tmp_path, "anneal", "trainer.iterations=4", "trainer.lr_anneal=true")
    train(cfg)
    assert _lrs(cfg) == pytest.approx([LR * (1 - i / 4) for i in range(4)], rel=1e-9)


def test_without_anneal_the_lr_is_constant_and_the_weights_differ(tiny_overrides, tmp_path):
    flat = run_cfg(tiny_overrides, tmp_path, "flat", "trainer.iterations=3")
    annealed = run_cfg(tiny_overrides, tmp_path, "annealed", "trainer.iterations=3", "trainer.lr_anneal=true")
    train(flat)
    train(annealed)
    assert _lrs(flat) == [LR] * 3
    a = policy_state(tmp_path / "flat" / "checkpoints" / "last.ckpt")
    b = policy_state(tmp_path / "annealed" / "checkpoints" / "last.ckpt")
    assert any(not torch.equal(a[k], b[k]) for k in a)  # iterations 1 and 2 took smaller steps


def test_a_resumed_annealed_run_repeats_the_uninterrupted_one(tiny_overrides, tmp_path):
    extra = ("trainer.iterations=4", "trainer.lr_anneal=true")
    straight_cfg = run_cfg(tiny_overrides, tmp_path, "a", *extra)
    straight = train(straight_cfg)
    resumed_cfg = run_cfg(
        tiny_overrides, tmp_path, "b", *extra, f"ckpt_path={tmp_path / 'a' / 'checkpoints' / 'iter0001.ckpt'}"
    )
    # the checkpoint names its MLflow run: resume into a copy of the first run's store
    (tmp_path / "b.db").write_bytes((tmp_path / "a.db").read_bytes())
    resumed = train(resumed_cfg)
    keys = [k for k in straight if not k.startswith(("time/", "perf/"))]
    assert {k: resumed[k] for k in keys} == {k: straight[k] for k in keys}
    assert _lrs(resumed_cfg) == _lrs(straight_cfg)
    a = policy_state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    b = policy_state(tmp_path / "b" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
