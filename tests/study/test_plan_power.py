"""``gigpo-lab study plan``'s power table read from pilot rows: per contrast the pilot's paired sd, the seeds
its δ needs, the power at the planned seeds and the smallest effect those seeds detect."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo_lab.analysis.power import detectable_effect, paired_power, planning_alpha, seeds_for
from gigpo_lab.study.plan import power
from gigpo_lab.study.spec import load_spec


def test_each_contrast_line_holds_its_pilot_sd_seeds_power_and_detectable_effect(tmp_path):
    import yaml

    path = tmp_path / "powered.yaml"
    path.write_text(yaml.safe_dump({
        "name": "powered", "question": "q", "settings": {"lake": [], "pond": []},
        "arms": {"a": [], "b": ["estimator=grpo"], "c": ["estimator=rloo"]},
        "seeds": {"start": 0, "stop": 30}, "pilot_seeds": {"start": 900, "stop": 905}, "metric": "eval_final",
        "delta": 0.1, "delta_reason": "r",
        "families": [{"name": "f", "settings": ["lake", "pond"],
                      "contrasts": [{"name": "H1", "a": "a", "b": "b"}, {"name": "H2", "a": "a", "b": "c"}]}],
    }))  # fmt: skip
    spec = load_spec(str(path)).spec
    a = [0.40, 0.55, 0.30, 0.62, 0.48]
    b = [0.35, 0.40, 0.38, 0.45, 0.50]
    rows = [
        {"setting": "lake", "arm": arm, "seed": 900 + i, "eval_final": v}
        for arm, values in (("a", a), ("b", b))
        for i, v in enumerate(values)
    ]
    lines = power(spec, rows)
    (line,) = [x for x in lines if x.startswith("| H1 lake |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    (family,) = spec.families
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
    (empty,) = [x for x in lines if x.startswith("| H2 lake |")]
    assert empty.count("| - ") == 4


def _priced_spec(tmp_path) -> str:
    import yaml

    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump({
        "name": "priced", "question": "q", "settings": {"lake": [], "pond": [], "sea": []},
        "arms": {"a": [], "b": ["lightning.num_threads=2"], "c": ["estimator=grpo"]},
        "seeds": {"start": 0, "stop": 3}, "pilot_seeds": {"start": 10, "stop": 12}, "metric": "eval_final",
        "delta": 0.1, "delta_reason": "r",
        "families": [{"name": "f", "settings": ["lake", "pond", "sea"],
                      "contrasts": [{"name": "H", "a": "a", "b": "b"}, {"name": "H2", "a": "c", "b": "a"}]}],
    }))  # fmt: skip
    return str(path)


#: Measured runs: lake/a with cpu_s, lake/b (2 threads) and pond/b with wall times only.
MEASURED = [
    {"setting": "lake", "arm": "a", "seed": 10, "wall_s": 900.0, "cpu_s": 100.0},
    {"setting": "lake", "arm": "a", "seed": 11, "wall_s": 900.0, "cpu_s": 300.0},
    {"setting": "lake", "arm": "b", "seed": 10, "wall_s": 5000.0},
    {"setting": "pond", "arm": "b", "seed": 10, "wall_s": 50.0},
    {"setting": "pond", "arm": "b", "seed": 11, "wall_s": 70.0, "cpu_s": None},
]


def test_a_cell_is_priced_by_cpu_seconds_at_its_threads_else_by_wall_times_threads(tmp_path):
    """``study plan``'s cost per run: the median ``cpu_s`` of the cell's runs, else of its setting's runs at the
    same torch threads (other jobs on the machine inflate wall time, not CPU time); where none has one,
    ``wall_s`` × the cell's threads, of the cell's runs, else of the setting's at those threads; a cell with
    none of these is unmeasured and left out of the CPU-hours."""
    from gigpo_lab.study.plan import cost

    spec = load_spec(_priced_spec(tmp_path)).spec
    cells, lines = cost(spec, MEASURED)
    priced = {(c["setting"], c["arm"]): c["cpu_s"] for c in cells}
    assert priced == {
        ("lake", "a"): 200.0, ("lake", "b"): 10000.0, ("lake", "c"): 200.0,
        ("pond", "a"): None, ("pond", "b"): 120.0, ("pond", "c"): None,
        ("sea", "a"): None, ("sea", "b"): None, ("sea", "c"): None,
    }  # fmt: skip
    table = "\n".join(lines)
    assert "| lake | a | 3 | 1 | 200 | the cell's 2 runs, cpu_s |" in table
    assert (
        "| lake | b | 3 | 2 | 10000 | the cell's 1 runs, wall × threads |" in table
    )  # not a's 1-thread cpu_s
    assert "| lake | c | 3 | 1 | 200 | the setting's 2 runs, cpu_s |" in table
    assert "| pond | b | 3 | 2 | 120 | the cell's 2 runs, wall × threads |" in table
    assert "| pond | a | 3 | 1 | unmeasured | - |" in table  # pond's only runs are at 2 threads
    (total,) = [x for x in lines if x.startswith("Runs:")]
    hours = 3 * (200 + 10000 + 200 + 120) / 3600
    assert (
        total
        == f"Runs: 27 in 9 cells. CPU-hours: {hours:.1f} for the 12 runs of measured settings, plus 15 runs unmeasured."
    )


def test_status_spends_each_runs_cpu_s_and_prices_what_is_left_as_plan_does(tmp_path, capsys):
    """``study status --pilot`` over run files: CPU-hours spent are each finished run's ``cpu_s`` (else wall ×
    threads), and to go the cell's ``plan.price`` per missing run."""
    import json

    from gigpo_lab.study.cli import main

    spec, out = _priced_spec(tmp_path), tmp_path / "priced"
    for row in MEASURED:
        path = out / "runs" / row["setting"] / row["arm"] / f"seed_{row['seed']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row | {"run_id": f"r{row['seed']}", "eval_final": 0.5}))
    assert main(["status", spec, "--out", str(out), "--pilot"]) == 0
    table = capsys.readouterr().out
    assert f"| lake | a | 2 | 0 | 0 | 0 | {400 / 3600:.2f} | 0.00 |" in table
    assert f"| lake | b | 1 | 0 | 0 | 1 | {10000 / 3600:.2f} | {10000 / 3600:.2f} |" in table
    assert f"| lake | c | 0 | 0 | 0 | 2 | 0.00 | {400 / 3600:.2f} |" in table
    assert f"| pond | b | 2 | 0 | 0 | 0 | {240 / 3600:.2f} | 0.00 |" in table
    assert "| pond | a | 0 | 0 | 0 | 2 | 0.00 | ? |" in table


def test_status_reads_running_and_failed_runs_from_every_store_it_is_given(tmp_path, capsys):
    """Two loops of one study, each with its own MLflow store: ``study status --store A --store B`` counts a
    run in flight in A and a failed one in B, and a seed failed in A then running in B by its latest run."""
    import time

    from mlflow.tracking import MlflowClient

    from gigpo_lab.study.cli import main
    from gigpo_lab.study.rows import ARM_TAG, SETTING_TAG, STUDY_TAG

    spec, out = _priced_spec(tmp_path), tmp_path / "priced"

    def run(store, arm, seed, status):
        client = MlflowClient(f"sqlite:///{store}")
        found = client.get_experiment_by_name("priced")
        exp = found.experiment_id if found else client.create_experiment("priced")
        tags = {STUDY_TAG: "priced", SETTING_TAG: "lake", ARM_TAG: arm, "seed": str(seed)}
        run_id = client.create_run(exp, tags=tags).info.run_id
        if status != "RUNNING":
            client.set_terminated(run_id, status=status)
        time.sleep(0.01)  # start times in ms order the runs

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    run(a, "a", 0, "RUNNING")
    run(a, "b", 1, "FAILED")
    run(b, "b", 1, "RUNNING")  # seed 1 of b was rerun by the other loop: its latest run counts
    run(b, "c", 2, "KILLED")
    assert main(["status", spec, "--out", str(out), "--store", str(a), "--store", str(b)]) == 0
    table = capsys.readouterr().out
    assert "| lake | a | 0 | 1 | 0 | 2 |" in table
    assert "| lake | b | 0 | 1 | 0 | 2 |" in table
    assert "| lake | c | 0 | 0 | 1 | 2 |" in table
    assert main(["status", spec, "--out", str(out), "--store", str(b), "--store", str(a)]) == 0
    assert "| lake | b | 0 | 1 | 0 | 2 |" in capsys.readouterr().out  # the latest run, not the last store's
    assert main(["status", spec, "--out", str(out), "--store", str(a)]) == 0
    assert "| lake | b | 0 | 0 | 1 | 2 |" in capsys.readouterr().out  # one store alone sees only its failure
    assert main(["status", spec, "--out", str(out), "--store", str(tmp_path / "typo.db")]) == 2
    assert "typo.db: no such file" in capsys.readouterr().err
