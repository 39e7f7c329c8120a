"""The recipe around the estimators is the same for every estimator (docs/ALGORITHMS.md, "The recipe around the
estimators"; issue #31).

With the default exploration (``exploration=count``, its own advantage stream), the part that exploration adds
to a batch's advantages must be the same per-row values whichever estimator runs, and must equal an oracle
written from the stream's definition: the trajectory's discounted bonus-to-go, whitened over the batch. The
estimator's own part must be the estimator applied to the env's rewards, as with ``exploration=none``.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import advantage_oracle as oracle
import pytest
import torch
from hydra.utils import instantiate
from hypothesis import given, settings
from real_runs import history, run_cfg
from tiny_sizes import MOVES_AT_ONCE

from gigpo_lab.algorithm import available_estimators
from gigpo_lab.batch import StepBatch
from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train

ESTIMATORS = available_estimators()


def _next_anchors(rows) -> list[str]:
    """The state after each row: the next row's anchor in its trajectory, or an end state of its own."""
    at = {(r.traj, r.step): r.anchor for r in rows}
    return [
        f"s{at[(r.traj, r.step + 1)]}" if (r.traj, r.step + 1) in at else f"end{r.traj % 3}" for r in rows
    ]


def _batch(rows) -> StepBatch:
    cols = oracle.columns(rows)
    batch = StepBatch(**{k: v for k, v in cols.items() if k != "anchor_texts"})
    batch.anchor_texts = [f"s{r.anchor}" for r in rows]
    batch.next_anchor_texts = _next_anchors(rows)
    return batch


def _bonus_oracle(rows) -> list[float]:
    """The beta = 1 count bonus of each row from its definition: 1 / sqrt(N(s')) after the batch is counted,
    paid only on a step into a state its episode had not been in (the reset state counts as visited)."""
    nxt = _next_anchors(rows)
    count = Counter(nxt)
    visited: dict[int, set[str]] = {}
    pays = {}
    for i in sorted(range(len(rows)), key=lambda i: (rows[i].traj, rows[i].step)):
        seen = visited.setdefault(rows[i].traj, set())
        if rows[i].step == 0:
            seen.add(f"s{rows[i].anchor}")
        pays[i] = nxt[i] not in seen
        seen.add(nxt[i])
    return [pays[i] / math.sqrt(count[nxt[i]]) for i in range(len(rows))]


@functools.cache
def _config(name: str):
    return compose_config([f"estimator={name}"])


@functools.cache
def _default_beta() -> float:
    """The default exploration's beta (composed once: a compose per hypothesis example cost seconds)."""
    return compose_config([]).exploration.beta


def _recipe(name: str):
    """The default config's estimator ``name`` and a fresh default exploration, as the trainer builds them."""
    cfg = _config(name)
    return instantiate(cfg.estimator), instantiate(cfg.exploration)


@settings(max_examples=40, deadline=None)
@given(oracle.batches())
def test_exploration_adds_the_same_oracle_stream_to_every_estimator(rows):
    bonus_rows = [
        oracle.Row(r.group, r.traj, r.step, b, r.anchor, r.invalid, r.text, r.truncated)
        for r, b in zip(rows, _bonus_oracle(rows), strict=True)
    ]
    beta = _default_beta()  # the first collection pays the whole beta
    want = [beta * a for a in oracle.intrinsic_stream(bonus_rows)]
    added = {}
    for name in ESTIMATORS:
        estimator, exploration = _recipe(name)
        plain = estimator(_batch(rows)).advantages  # exploration=none: the env's rewards only
        batch = _batch(rows)
        bonus = exploration(batch)
        own = estimator(batch).advantages
        assert torch.equal(own, plain), f"{name} must see the env's rewards, untouched by the bonus"
        total = bonus.add_to(own)
        dose = (
            max(float(own.double().std()), exploration.dose_floor) if len(own) > 1 else exploration.dose_floor
        )
        assert (total - own).tolist() == pytest.approx([dose * w for w in want], rel=1e-5, abs=1e-6), name
        added[name] = bonus.add_to(torch.zeros_like(own))  # the stream alone (at the floor: no own signal)
    first = added[ESTIMATORS[0]]
    assert all(torch.equal(first, a) for a in added.values()), "one stream for every estimator, bit for bit"


def test_in_real_runs_every_estimator_gets_the_same_stream_on_the_same_rollout(tiny_overrides, tmp_path):
    """Iteration 0 of a real run samples from the same initial policy whatever the estimator, so the same
    episodes are collected, and the stream's size must then be the same for every estimator."""
    sizes, tiny_overrides = {}, [*tiny_overrides, MOVES_AT_ONCE]
    for name in ("grpo", "rloo", "reinforce_pp", "gigpo"):
        train(run_cfg(tiny_overrides, tmp_path, name, f"estimator={name}", "trainer.iterations=1"))
        uri = f"sqlite:///{tmp_path / name}.db"
        sizes[name] = (history(uri, "rollout/return")[0], history(uri, "rollout/intrinsic_adv_abs")[0])
    assert sizes["grpo"][1][1] > 0, "the tiny rollout found new states, so the stream is not all 0"
    assert len(set(sizes.values())) == 1, sizes


@settings(max_examples=40, deadline=None)
@given(oracle.batches())
def test_at_the_defaults_every_estimator_gets_the_same_dose_of_the_stream(rows):
    """The dose bound (issue #45): std(stream) / std(own advantages) on one batch is the same beta for every
    estimator at its defaults wherever its own advantages spread at least the floor (so any two estimators'
    ratios differ by at most 1.25x, here by float rounding), and wherever they do not, every such estimator
    gets the one floor stream. The old fixed-std stream gave ratios from 0.5x to 2.1x by estimator."""
    beta = _default_beta()
    ratios, floored = {}, []
    for name in ESTIMATORS:
        estimator, exploration = _recipe(name)
        batch = _batch(rows)
        bonus = exploration(batch)
        own = estimator(batch).advantages
        if bonus.intrinsic_advantages is None or not float(bonus.intrinsic_advantages.abs().max()) > 0:
            return  # a batch whose stream is all 0 (every bonus-to-go equal) has no dose to compare
        spread = float(own.double().std()) if len(own) > 1 else 0.0
        if spread >= exploration.dose_floor:
            ratios[name] = bonus.dose(own)["adv/stream_ratio"]
        else:
            floored.append(bonus.add_to(torch.zeros_like(own)) + 0.0)
    for name, ratio in ratios.items():
        assert ratio == pytest.approx(beta, rel=1e-4), name  # std(A_int) is 1 up to its 1e-6 eps
    if ratios:
        assert max(ratios.values()) / min(ratios.values()) <= 1.25
    assert all(torch.equal(floored[0], f) for f in floored)
