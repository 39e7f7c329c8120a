"""StableAdamW against a plain-Python loop of Wortsman et al.'s Algorithm 2, against torch's AdamW where no
clipping happens, on a gradient spike, and in a real run."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.train import train
from gigpo_lab.training.stable_adamw import StableAdamW
from tests.real_runs import policy_state, run_cfg

LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 0.01


def oracle(p0: list[float], grads: list[list[float]]) -> list[float]:
    """The algorithm on Python floats, one tensor: bias-corrected moments, rms of g^2 / v_hat, lr / max(1, rms)."""
    b1, b2 = BETAS
    p, m, v = list(p0), [0.0] * len(p0), [0.0] * len(p0)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        m_hat = [mi / (1 - b1**t) for mi in m]
        v_hat = [vi / (1 - b2**t) for vi in v]
        rms = math.sqrt(sum(gi * gi / max(vh, EPS * EPS) for gi, vh in zip(g, v_hat, strict=True)) / len(g))
        lr = LR / max(1.0, rms)
        p = [pi * (1 - lr * WD) for pi in p]
        p = [pi - lr * mh / (math.sqrt(vh) + EPS) for pi, mh, vh in zip(p, m_hat, v_hat, strict=True)]
    return p


def run(p0: list[float], grads: list[list[float]], cls=StableAdamW) -> torch.Tensor:
    p = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = cls([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach()


finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.lists(finite, min_size=n, max_size=n),
            st.lists(st.lists(finite, min_size=n, max_size=n), min_size=1, max_size=12),
        )
    )
)
def test_matches_the_python_loop(case):
    p0, grads = case
    assert torch.allclose(
        run(p0, grads), torch.tensor(oracle(p0, grads), dtype=torch.float64), rtol=1e-9, atol=1e-12
    )


def test_a_steady_gradient_is_not_clipped_so_it_steps_as_adamw():
    grads = [[0.5, -2.0, 1e-3]] * 20  # g^2 / v_hat = 1 every step
    assert torch.allclose(
        run([1.0, 1.0, 1.0], grads), run([1.0, 1.0, 1.0], grads, torch.optim.AdamW), rtol=1e-12
    )


def test_a_gradient_spike_after_a_quiet_past_is_clipped():
    quiet = [[1e-4, 1e-4]] * 200
    spike = [[1.0, 1.0]]
    before = run([0.0, 0.0], quiet)
    adamw = run([0.0, 0.0], quiet + spike, torch.optim.AdamW) - run([0.0, 0.0], quiet, torch.optim.AdamW)
    stable = run([0.0, 0.0], quiet + spike) - before
    # after the spike v_hat is about 0.0055 (sqrt 0.074), m_hat 0.1: Adam steps 1.35 lr, and rms = 1 / 0.074 = 13.5
    assert adamw.abs().min() > LR
    assert stable.abs().max() < adamw.abs().min() / 10


@pytest.mark.parametrize("kwargs", [{"lr": 0.0}, {"betas": (0.9, 1.0)}, {"eps": 0.0}, {"weight_decay": -0.1}])
def test_bad_arguments_are_refused_by_name(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        StableAdamW([torch.nn.Parameter(torch.zeros(2))], **kwargs)


def test_a_real_run_trains_with_it(tiny_overrides, tmp_path):
    target = "trainer.optimizer._target_=gigpo_lab.training.stable_adamw.StableAdamW"
    stable = run_cfg(tiny_overrides, tmp_path, "stable", "trainer.iterations=2", target)
    adamw = run_cfg(tiny_overrides, tmp_path, "adamw", "trainer.iterations=2")
    metrics = train(stable)
    train(adamw)
    assert math.isfinite(metrics["train/loss"])
    a = policy_state(tmp_path / "stable" / "checkpoints" / "last.ckpt")
    b = policy_state(tmp_path / "adamw" / "checkpoints" / "last.ckpt")
    assert any(
        not torch.equal(a[k], b[k]) for k in a
    )  # the option reached the run: these are not AdamW's weights
