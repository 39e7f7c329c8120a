"""The failure diagnostics (gigpo_lab/algorithm/diagnostics.py) against plain-Python oracles, and in a real run."""

from __future__ import annotations

import math
import statistics

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient

from gigpo_lab.algorithm.diagnostics import CollapseCounter, group_signal, logprob_gap, revisit_rate
from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train

returns_and_groups = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0, -0.1])), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(returns_and_groups)
def test_group_signal_matches_a_python_oracle(pairs):
    groups = torch.tensor([g for g, _ in pairs])
    returns = torch.tensor([r for _, r in pairs])
    by_group: dict[int, list[float]] = {}
    for g, r in pairs:
        by_group.setdefault(g, []).append(r)
    want_std = statistics.fmean(statistics.pstdev(v) for v in by_group.values())
    want_flat = statistics.fmean(float(len(set(v)) == 1) for v in by_group.values())
    got = group_signal(returns, groups)
    assert math.isclose(got["rollout/group_return_std"], want_std, abs_tol=1e-6)
    assert math.isclose(got["rollout/flat_groups"], want_flat, abs_tol=1e-12)


def test_logprob_gap_reads_only_real_tokens():
    sampled = torch.tensor([[-1.0, -5.0], [-2.0, 0.0]])
    rescored = torch.tensor([[-1.25, 9.0], [-2.0, 3.0]])
    mask = torch.tensor([[True, False], [True, False]])
    assert logprob_gap(sampled, rescored, mask) == {"rollout/logprob_gap": 0.25}


def test_an_injected_collapse_is_counted_only_after_the_policy_was_trained():
    counter = CollapseCounter()
    # (rollout success, invalid rate) per iteration: an early high invalid rate is exploration, not collapse;
    # success passes 0.5 at the third iteration, then the invalid rate jumps twice
    history = [(0.0, 0.9), (0.3, 0.4), (0.6, 0.05), (0.7, 0.02), (0.1, 0.85), (0.0, 0.9), (0.4, 0.25)]
    counts = [counter.update(s, i)["rollout/collapses"] for s, i in history]
    assert counts == [0, 0, 0, 0, 1, 2, 2]
    restored = CollapseCounter()
    restored.load(counter.state())
    assert restored.update(0.0, 0.5)["rollout/collapses"] == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=8), min_size=1, max_size=6))
def test_revisit_rate_matches_a_python_oracle(episodes):
    episode = torch.tensor([e for e, states in enumerate(episodes) for _ in states])
    states = torch.tensor([s for states in episodes for s in states])
    want = statistics.fmean(float(len(set(s)) < len(s)) for s in episodes)
    assert math.isclose(revisit_rate(episode, states, len(episodes)), want, abs_tol=1e-12)


def _final_metrics(uri: str) -> dict[str, float]:
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    return run.data.metrics


def test_a_real_run_logs_the_diagnostics_and_target_kl_stops_the_updates(tiny_overrides, tmp_path):
    # target_kl below any real approx_kl: every iteration takes its first minibatch step (the policy still
    # equals the sampling policy, approx_kl 0) and stops at the second
    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=4", "trainer.target_kl=1e-12"])
    train(cfg)
    m = _final_metrics(cfg.tracking.uri)
    for key in ("rollout/flat_groups", "rollout/group_return_std", "rollout/entropy", "rollout/collapses"):
        assert key in m
    assert 0.0 <= m["rollout/flat_groups"] <= 1.0
    assert 0.0 <= m["eval/revisit_rate"] <= 1.0
    # the engine's sampling log-probs and the rescored old log-probs describe the same distribution
    assert m["rollout/logprob_gap"] < 1e-4
    assert 0.0 < m["rollout/entropy"] <= math.log(10_000)
    assert 0.0 < m["train/steps_taken"] < 1.0
    assert m["train/approx_kl_max"] > 1e-12


def test_without_target_kl_every_minibatch_steps(tiny_overrides):
    cfg = compose_config([*tiny_overrides, "trainer.minibatch_size=4"])
    train(cfg)
    assert _final_metrics(cfg.tracking.uri)["train/steps_taken"] == 1.0
