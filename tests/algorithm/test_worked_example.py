"""The worked vector of ALGORITHMS.md, its intermediate values, and hand-derived values for the others.

One group; mode = mean_norm unless stated, gamma = 0.95, omega = 1, penalty 0.1::

    A: s0 s1 s2      rewards 0 0 10
    B: s0 s1 s1 s3   rewards 0 0 0 0   (invalid action at step 1)
    C: s0 s2         rewards 0 10
"""

from __future__ import annotations

import pytest
import torch

from gigpo_lab.algorithm import build_estimator, compute_advantages
from gigpo_lab.batch import StepBatch

TRAJ = [0, 0, 0, 1, 1, 1, 1, 2, 2]
STEP = [0, 1, 2, 0, 1, 2, 3, 0, 1]
ANCHOR = [0, 1, 2, 0, 1, 1, 3, 0, 2]  # s0..s3
REWARD = [0, 0, 10, 0, 0, 0, 0, 0, 10]
INVALID = [False, False, False, False, True, False, False, False, False]

GIGPO = {
    "mean_norm": [7.3056, 10.8222, 4.4556, -11.7194, -8.8778, -8.6778, -5.5444, 7.7806, 4.4556],
    "mean_std_norm": [1.3757, 1.9979, 0.8433, -2.2029, -1.6547, -1.6176, -1.0493, 1.4644, 0.8433],
}


def cols(dtype=torch.float64, anchors=ANCHOR, order=None):
    order = list(range(len(TRAJ))) if order is None else order

    def pick(xs, **kw):
        return torch.tensor([xs[i] for i in order], **kw)

    return {
        "rewards": pick(REWARD, dtype=dtype),
        "group_ids": torch.full((len(order),), 42, dtype=torch.int64),
        "traj_ids": pick(TRAJ, dtype=torch.int64),
        "step_ids": pick(STEP, dtype=torch.int64),
        "anchor_ids": pick(anchors, dtype=torch.int64),
        "invalid": pick(INVALID, dtype=torch.bool),
    }


def close(got, want, atol=1e-4):
    torch.testing.assert_close(got.double(), torch.tensor(want, dtype=torch.float64), rtol=0, atol=atol)


@pytest.mark.parametrize("mode", sorted(GIGPO))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gigpo_table(mode, dtype):
    adv = compute_advantages("gigpo", **cols(dtype), mode=mode)
    assert adv.dtype == dtype
    close(adv, GIGPO[mode])


@pytest.mark.parametrize("mode", sorted(GIGPO))
def test_gigpo_table_does_not_depend_on_row_order(mode):
    order = [8, 3, 0, 6, 2, 4, 7, 1, 5]
    adv = compute_advantages("gigpo", **cols(order=order), mode=mode)
    close(adv, [GIGPO[mode][i] for i in order])


def test_intermediate_episode_advantage():
    """A^E = grpo: A and C rows 4.4556; B rows -5.5444, B's invalid row -5.6444."""
    e = 4.4556
    close(compute_advantages("grpo", **cols()), [e, e, e, -5.5444, -5.6444, -5.5444, -5.5444, e, e])


def test_intermediate_discounted_returns():
    """With every anchor distinct and raw singletons, gigpo - grpo is the step return G_t - p_i."""
    distinct = list(range(9))
    kw = {"step_singleton": "raw"}
    step = compute_advantages("gigpo", **cols(anchors=distinct), **kw) - compute_advantages("grpo", **cols())
    close(step, [9.025, 9.5, 10.0, 0.0, -0.1, 0.0, 0.0, 9.5, 10.0], atol=1e-9)


def test_intermediate_step_advantage_of_the_s0_group():
    """A^S for s0 = {A0, B0, C0}: A 2.85, B -6.175, C 3.325; s2 = {A2, C1} gives 0; s3 = {B3} gives 0."""
    step = compute_advantages("gigpo", **cols()) - compute_advantages("grpo", **cols())
    close(step[[0, 3, 7]], [2.85, -6.175, 3.325], atol=1e-9)
    close(step[[2, 8, 6]], [0.0, 0.0, 0.0], atol=1e-9)


def test_metrics_of_the_worked_vector():
    batch = StepBatch(**cols())
    out = build_estimator("gigpo")(batch)
    assert out.metrics["adv/step_groups"] == 4.0
    assert out.metrics["adv/step_group_size"] == pytest.approx(9 / 4)
    assert out.metrics["adv/singleton_frac"] == pytest.approx(1 / 9)
    assert out.metrics["adv/mean"] == pytest.approx(float(out.advantages.mean()))
    assert out.metrics["adv/episode_mean"] == pytest.approx(0.0, abs=1e-9)  # rows mode: A^E sums to 0
    for key in ("adv/std", "adv/episode_std", "adv/step_mean", "adv/step_std"):
        assert key in out.metrics


def test_rloo_by_hand():
    """b(A) = (0 + 10)/2 = 5, b(B) = (10 + 10)/2 = 10, b(C) = 5."""
    close(compute_advantages("rloo", **cols()), [5, 5, 5, -10, -10.1, -10, -10, 5, 5], atol=1e-9)


def test_reinforce_pp_equals_grpo_mean_std_on_one_group():
    """One group: subtracting the group mean return only shifts every row, which whitening removes."""
    got = compute_advantages("reinforce_pp", **cols())
    want = compute_advantages("grpo", **cols(), mode="mean_std_norm")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9)


def test_gigpo_step_index_by_hand():
    """R = 10, 0, 10 (mean 20/3). Step-index means: t0 0; t1 10/3; t2 5; t3 0 (B alone).

    abar(A) = (0 - 10/3 + 5)/3 = 5/9; abar(B) = (0 - 10/3 - 5 + 0)/4 = -25/12; abar(C) = (0 + 20/3)/2 = 10/3.
    """
    a, b, c = 10 / 3 + 5 / 9, -20 / 3 - 25 / 12, 10 / 3 + 10 / 3
    close(compute_advantages("gigpo_step_index", **cols()), [a] * 3 + [b] * 4 + [c] * 2, atol=1e-9)
    std = (100 / 3) ** 0.5  # unbiased std of (10, 0, 10)
    scaled = compute_advantages("gigpo_step_index", **cols(), scale_by_std=True)
    close(scaled, [x / (std + 1e-6) for x in [a] * 3 + [b] * 4 + [c] * 2], atol=1e-9)


def test_trajectories_mode_with_equal_returns_divides_the_penalty_by_eps():
    """Documented contract behaviour: equal R(tau) give std 0, so an invalid row gets -p / eps = -1e5."""
    c = {
        "rewards": torch.tensor([5.5, 5.5, 5.5], dtype=torch.float64),
        "group_ids": torch.zeros(3, dtype=torch.int64),
        "traj_ids": torch.tensor([0, 1, 2]),
        "invalid": torch.tensor([False, False, True]),
    }
    adv = compute_advantages("grpo", **c, mode="mean_std_norm", normalize_over="trajectories")
    close(adv, [0.0, 0.0, -0.1 / 1e-6], atol=1e-6)
    rows_mode = compute_advantages("grpo", **c, mode="mean_std_norm")  # the penalty enters the std
    assert abs(float(rows_mode[2])) < 2.0
