"""Every estimator against the loop oracle (tests/advantage_oracle.py) on random batches: 100 each in the default
suite, 1,500 each in ``make test-slow`` (tests/property_examples.py); the other property tests here draw 100 and 600.

The batches have random group sizes (singletons included), repeated anchors inside a trajectory, invalid
rows, constant groups, arbitrary int64 ids and shuffled rows; the parameters are drawn too.
"""

from __future__ import annotations

import pytest
import torch
from advantage_oracle import ORACLES, TEXTS, Row, batches, columns
from hypothesis import given
from hypothesis import strategies as st
from property_examples import examples

from gigpo_lab.algorithm import compute_advantages

EXAMPLES = examples(100, 600)

_mode = st.sampled_from(["mean_norm", "mean_std_norm"])
_penalty = st.sampled_from([0.0, 0.1, 1.0])
_singleton = st.sampled_from(["raw", "zero"])
_weight = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 2.0))
_gamma = st.one_of(st.sampled_from([0.0, 0.95, 1.0]), st.floats(0.0, 1.0))
_episode = {
    "mode": _mode,
    "normalize_over": st.sampled_from(["rows", "trajectories"]),
    "invalid_action_penalty": _penalty,
    "episode_singleton": _singleton,
}
PARAMS = {
    "grpo": st.fixed_dictionaries(_episode),
    "rloo": st.fixed_dictionaries({"invalid_action_penalty": _penalty}),
    "reinforce_pp": st.fixed_dictionaries({"invalid_action_penalty": _penalty}),
    "gigpo": st.fixed_dictionaries(
        {**_episode, "step_advantage_weight": _weight, "gamma": _gamma, "step_singleton": _singleton}
    ),
    "gigpo_step_index": st.fixed_dictionaries(
        {"step_advantage_weight": _weight, "scale_by_std": st.booleans()}
    ),
    "ppo": st.fixed_dictionaries(
        {
            "gamma": _gamma,
            "lam": _gamma,
            "whiten_advantages": st.booleans(),
            "invalid_action_penalty": _penalty,
        }
    ),
}


def assert_matches_oracle(name: str, rows: list[Row], params: dict) -> None:
    """Equal to 1e-6 absolute, or 1e-7 relative for the huge values of near-zero-std groups.

    Under mean_std_norm a group whose entries are equal but whose rows differ (a penalty under
    normalize_over=trajectories) divides by eps = 1e-6 and reaches 1e5; a rounding of 1e-15 in a std is
    then a relative change of 1e-9, which no implementation can avoid.
    """
    got = compute_advantages(name, **columns(rows), **params)
    want = torch.tensor(ORACLES[name](rows, **params), dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-6, msg=lambda m: f"{name} {params}\n{rows}\n{m}")


@pytest.mark.parametrize("name", sorted(PARAMS))
@examples(100, 1500)
@given(data=st.data())
def test_matches_the_loop_oracle(name, data):
    """One drawn batch and parameter set of estimator ``name`` against its loop oracle."""
    rows = data.draw(batches(), label="rows")
    params = data.draw(PARAMS[name], label="params")
    assert_matches_oracle(name, rows, params)


@EXAMPLES
@given(
    rows=batches(),
    params=PARAMS["gigpo"],
    gamma=st.one_of(st.sampled_from([0.0, 0.95]), st.floats(0.0, 0.99)),
)
def test_bootstrap_truncated_matches_the_oracle(rows, params, gamma):
    """The cut trajectories' tails: the oracle starts its backwards loop from mean / (1 - gamma)."""
    assert_matches_oracle("gigpo", rows, {**params, "gamma": gamma, "bootstrap_truncated": True})


@EXAMPLES
@given(
    rows=batches(max_steps=4),
    params=PARAMS["gigpo"],
    threshold=st.one_of(st.sampled_from([0.5, 0.9, 0.99]), st.floats(0.01, 0.99)),
)
def test_similarity_mode_matches_the_oracle(rows, params, threshold):
    """Text anchors clustered by difflib ratio, greedy first-member clusters inside each group."""
    assert_matches_oracle("gigpo", rows, {**params, "anchor_similarity_threshold": threshold})


def test_similarity_clusters_near_duplicates_and_keeps_groups_apart():
    """Hand-made: 'facing north/south' merge at 0.9, 'door open/closed' do not; groups never mix."""
    texts = [TEXTS[0], TEXTS[1], TEXTS[3], TEXTS[4], TEXTS[0]]
    rows = [
        Row(group=0, traj=0, step=t, reward=float(t), anchor=0, invalid=False, text=x)
        for t, x in enumerate(texts)
    ]
    rows.append(Row(group=1, traj=1, step=0, reward=5.0, anchor=0, invalid=False, text=TEXTS[1]))
    params = {
        "anchor_similarity_threshold": 0.9,
        "step_singleton": "raw",
        "step_advantage_weight": 1.0,
        "gamma": 0.0,
    }
    base = compute_advantages("gigpo", **columns(rows), **{**params, "step_advantage_weight": 0.0})
    step = compute_advantages("gigpo", **columns(rows), **params) - base
    # cluster {0, 1, 4} (rewards 0, 1, 4: mean 5/3), {2} and {3} are singletons (raw), group 1 alone.
    torch.testing.assert_close(
        step, torch.tensor([-5 / 3, -2 / 3, 2.0, 3.0, 7 / 3, 5.0], dtype=torch.float64)
    )


def test_identical_long_texts_share_a_step_group_despite_autojunk():
    """difflib's autojunk gives ratio 0 for 'a' * 300 against itself; equal anchors are still one state."""
    rows = [
        Row(group=0, traj=j, step=0, reward=float(j), anchor=0, invalid=False, text="a" * 300)
        for j in range(2)
    ]
    adv = compute_advantages(
        "gigpo", **columns(rows), anchor_similarity_threshold=0.5, step_advantage_weight=1.0
    )
    ep = compute_advantages(
        "gigpo", **columns(rows), anchor_similarity_threshold=0.5, step_advantage_weight=0.0
    )
    torch.testing.assert_close(adv - ep, torch.tensor([-0.5, 0.5], dtype=torch.float64))
