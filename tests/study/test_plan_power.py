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


def test_a_cell_is_priced_by_cpu_seconds_where_its_setting_has_them_else_by_wall_times_threads(tmp_path):
    """``study plan``'s cost per run: the median ``cpu_s`` of the cell's runs, else of its setting's (other jobs
    on the machine inflate wall time, not CPU time); where no run of the setting has one, ``wall_s`` × the cell's
    torch threads, of the cell's runs, else of the setting's; a setting without runs is unmeasured and left out
    of the CPU-hours."""
    import yaml

    from gigpo_lab.study.plan import cost

    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump({
        "name": "priced", "question": "q", "settings": {"lake": [], "pond": [], "sea": []},
        "arms": {"a": [], "b": ["lightning.num_threads=2"]}, "seeds": {"start": 0, "stop": 3},
        "pilot_seeds": {"start": 10, "stop": 12}, "metric": "eval_final", "delta": 0.1, "delta_reason": "r",
        "families": [{"name": "f", "settings": ["lake", "pond", "sea"], "contrasts": [{"name": "H", "a": "a", "b": "b"}]}],
    }))  # fmt: skip
    spec = load_spec(str(path)).spec
    measured = [
        {"setting": "lake", "arm": "a", "seed": 10, "wall_s": 900.0, "cpu_s": 100.0},
        {"setting": "lake", "arm": "a", "seed": 11, "wall_s": 900.0, "cpu_s": 300.0},
        {"setting": "lake", "arm": "b", "seed": 10, "wall_s": 5000.0},
        {"setting": "pond", "arm": "b", "seed": 10, "wall_s": 50.0},
        {"setting": "pond", "arm": "b", "seed": 11, "wall_s": 70.0, "cpu_s": None},
    ]
    cells, lines = cost(spec, measured)
    priced = {(c["setting"], c["arm"]): c["cpu_s"] for c in cells}
    assert priced == {("lake", "a"): 200.0, ("lake", "b"): 200.0, ("pond", "a"): 60.0, ("pond", "b"): 120.0,
                      ("sea", "a"): None, ("sea", "b"): None}  # fmt: skip
    table = "\n".join(lines)
    assert "| lake | a | 3 | 1 | 200 | the cell's 2 runs, cpu_s |" in table
    assert "| lake | b | 3 | 2 | 200 | the setting's 2 runs, cpu_s |" in table
    assert "| pond | a | 3 | 1 | 60 | the setting's 2 runs, wall × threads |" in table
    assert "| pond | b | 3 | 2 | 120 | the cell's 2 runs, wall × threads |" in table
    assert "| sea | a | 3 | 1 | unmeasured | - |" in table
    (total,) = [x for x in lines if x.startswith("Runs:")]
    hours = 3 * (200 + 200 + 60 + 120) / 3600
    assert (
        total
        == f"Runs: 18 in 6 cells. CPU-hours: {hours:.1f} for the 12 runs of measured settings, plus 6 runs unmeasured."
    )
