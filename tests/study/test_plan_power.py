"""``gigpo-lab study plan``'s power table read from pilot rows: per contrast the pilot's paired sd, the seeds
its δ needs, the power at the planned seeds and the smallest effect those seeds detect."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo_lab.analysis.power import detectable_effect, paired_power, planning_alpha, seeds_for
from gigpo_lab.study.plan import power
from gigpo_lab.study.spec import load_spec


def test_each_contrast_line_holds_its_pilot_sd_seeds_power_and_detectable_effect():
    spec = load_spec("gigpo_llm_claims").spec
    a = [0.40, 0.55, 0.30, 0.62, 0.48]
    b = [0.35, 0.40, 0.38, 0.45, 0.50]
    rows = [
        {"setting": "frozenlake_random", "arm": arm, "seed": 900 + i, "eval_final": v}
        for arm, values in (("gigpo_paper", a), ("grpo_paper", b))
        for i, v in enumerate(values)
    ]
    lines = power(spec, rows)
    (line,) = [x for x in lines if x.startswith("| H1 frozenlake_random |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    family = next(f for f in spec.families if f.name == "paper")
    alpha = planning_alpha(spec.alpha, len(family.expanded()))
    planned = len(spec.family_seeds(family))
    sd = float(np.std(np.subtract(a, b), ddof=1))
    assert cells[1] == "5" and float(cells[2]) == pytest.approx(sd, abs=5e-4)
    assert int(cells[3]) == seeds_for(spec.family_delta(family), sd, alpha)
    assert float(cells[4]) == pytest.approx(
        paired_power(planned, spec.family_delta(family), sd, alpha), abs=5e-3
    )
    assert float(cells[5]) == pytest.approx(detectable_effect(planned, sd, alpha), abs=5e-4)
    # a contrast without two pilot pairs has no numbers
    (empty,) = [x for x in lines if x.startswith("| H2 frozenlake_random |")]
    assert empty.count("| - ") == 4
