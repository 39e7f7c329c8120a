"""GRPO with GiGPO's dose of the invalid-action penalty: the override ``estimator=grpo
estimator.invalid_action_penalty=<(1 + omega) * p>`` (0.2 at the defaults), no new key.

GiGPO subtracts p from an invalid row's episode score (A^E) and again from its step return (A^S, weight
omega), so where the row shares its state with other rows of its group (an invalid turn leaves the state
where it was, so the next row shares it) the penalty enters GiGPO (1 + omega) times, GRPO once. Under
``mode: mean_norm`` both are linear in p; where every step group is its whole episode group the two
baselines are the same mean, and the penalty's part of GiGPO's advantage, A(p) - A(0), is exactly GRPO's
at (1 + omega) * p.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import torch
from advantage_oracle import batches, columns
from hydra.utils import instantiate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gigpo_lab.batch import StepBatch
from gigpo_lab.config_paths import compose_config

#: The estimator options as the trainer composes them (``estimator=gigpo``, ``estimator=grpo``), once.
CONFIGS = {k: compose_config([f"estimator={k}"]).estimator for k in ("gigpo", "grpo")}


def advantages(name: str, rows, **overrides) -> torch.Tensor:
    """The advantages of the configured estimator ``name`` with ``estimator.<key>=<value>`` overrides."""
    estimator = instantiate(CONFIGS[name], **overrides)
    return estimator(StepBatch(**{k: v for k, v in columns(rows).items() if k != "values"})).advantages


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=batches(),
    omega=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 2.0)),
    p=st.sampled_from([0.1, 0.5, 1.0]),
    gamma=st.sampled_from([0.0, 0.95, 1.0]),
)
def test_grpo_at_one_plus_omega_p_carries_gigpos_penalty(rows, omega, p, gamma):
    """Every row of a group in one state (one step group per episode group, of two rows or more): the
    penalty's part of GiGPO's advantage at (omega, p) equals GRPO's at (1 + omega) * p. (A group of one row
    is a step group of one, whose A^S is 0: GiGPO charges it p, as GRPO does.)"""
    sizes = Counter(r.group for r in rows)
    rows = [replace(r, anchor=0) for r in rows if sizes[r.group] > 1]
    assume(rows)
    gigpo = {"step_advantage_weight": omega, "gamma": gamma}

    def part(name, penalty, **params):
        with_p = advantages(name, rows, invalid_action_penalty=penalty, **params)
        return with_p - advantages(name, rows, invalid_action_penalty=0.0, **params)

    torch.testing.assert_close(part("grpo", (1 + omega) * p), part("gigpo", p, **gigpo), rtol=1e-9, atol=1e-9)


def test_at_the_defaults_the_override_is_0_2():
    """The defaults, omega = 1 and p = 0.1: ``estimator.invalid_action_penalty=0.2``. One group, one state,
    one invalid row of four: GiGPO charges it 2 x 0.1 x (1 - 1/4) against the others, GRPO at 0.2 the same."""
    gigpo, grpo = instantiate(CONFIGS["gigpo"]), instantiate(CONFIGS["grpo"])
    assert gigpo.step_advantage_weight == 1.0 and gigpo.invalid_action_penalty == 0.1
    assert grpo.invalid_action_penalty == 0.1
    batch = {
        "rewards": torch.zeros(4, dtype=torch.float64),
        "group_ids": torch.zeros(4, dtype=torch.int64),
        "traj_ids": torch.arange(4),
        "step_ids": torch.zeros(4, dtype=torch.int64),
        "anchor_ids": torch.zeros(4, dtype=torch.int64),
        "invalid": torch.tensor([True, False, False, False]),
    }
    got_gigpo = gigpo(StepBatch(**batch)).advantages
    scaled = instantiate(compose_config(["estimator=grpo", "estimator.invalid_action_penalty=0.2"]).estimator)
    got_grpo = scaled(StepBatch(**batch)).advantages
    want = torch.tensor([-0.15, 0.05, 0.05, 0.05], dtype=torch.float64)
    torch.testing.assert_close(got_gigpo, want, rtol=0, atol=1e-15)
    torch.testing.assert_close(got_grpo, want, rtol=0, atol=1e-15)
    torch.testing.assert_close(grpo(StepBatch(**batch)).advantages, want / 2, rtol=0, atol=1e-15)
