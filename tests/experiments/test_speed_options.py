"""experiments/speed/: option files that make a run faster and change its numbers; each composes onto an
experiment and sets only what its comment says."""

from __future__ import annotations

from gigpo_lab.config_paths import compose_config


def test_llm_bf16_sets_the_three_options_and_nothing_else():
    base = compose_config(["experiments=smollm2_textworld_coin"])
    fast = compose_config(["experiments=smollm2_textworld_coin", "+experiments/speed=llm_bf16"])
    assert base.rollout.engine.prefill != "tree" and base.rollout.engine.autocast is None
    assert base.lightning.precision != "bf16-mixed"
    assert fast.rollout.engine.prefill == "tree" and fast.rollout.engine.autocast == "bfloat16"
    assert fast.lightning.precision == "bf16-mixed"
    fast.rollout.engine.prefill = base.rollout.engine.prefill
    fast.rollout.engine.autocast = base.rollout.engine.autocast
    fast.lightning.precision = base.lightning.precision
    assert fast == base
