"""The collapse counts of experiments/bench/seed_robustness.py against a brute-force oracle of their
definitions (issue #12's collapse, and a relapse: a collapse after the invalid rate had settled); the
overrides each seed composes, from a folder named after overrides; and the refusal of a bad override."""

from __future__ import annotations

import pytest
from experiment_scripts import load_script
from hypothesis import given, settings
from hypothesis import strategies as st

seed_robustness = load_script("bench/seed_robustness.py")


def _oracle(success: list[float], invalid: list[float]) -> tuple[int, int]:
    def trained_before(i: int) -> bool:
        return any(s > 0.5 for s in success[:i])

    collapses = [i for i in range(len(success)) if trained_before(i) and invalid[i] > 0.3]
    settled = [j for j in range(len(success)) if trained_before(j) and invalid[j] <= 0.3]
    relapses = [i for i in collapses if any(j < i for j in settled)]
    return len(collapses), len(relapses)


def _count(success, invalid):
    return seed_robustness.count_collapses(dict(enumerate(success)), dict(enumerate(invalid)))


def test_a_falling_invalid_rate_counts_as_collapse_but_not_as_relapse():
    # gym FrozenLake's pattern: success passes 0.5 at iteration 1 while the invalid rate still falls
    assert _count([0.25, 0.66, 0.75, 0.92, 1.0], [0.82, 0.65, 0.48, 0.36, 0.27]) == (2, 0)


def test_a_rise_after_settling_is_a_relapse():
    assert _count([0.2, 0.9, 1.0, 0.1, 0.9], [0.5, 0.2, 0.1, 0.8, 0.2]) == (1, 1)


def test_an_untrained_run_has_neither():
    assert _count([0.0, 0.1, 0.2], [0.9, 0.9, 0.9]) == (0, 0)


rates = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(rates, rates), max_size=30))
def test_counts_match_the_brute_force_definitions(pairs):
    success, invalid = [p[0] for p in pairs], [p[1] for p in pairs]
    collapses, relapses = _count(success, invalid)
    assert (collapses, relapses) == _oracle(success, invalid)
    assert 0 <= relapses <= collapses


def _runs(db):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    steps = [[m.step for m in client.get_metric_history(r.info.run_id, "rollout/success_rate")] for r in runs]
    return [(r.info.run_id, r.info.status, r.info.end_time) for r in runs], steps


@pytest.mark.slow  # ~1 CPU-minute: three harness processes, two 6-iteration tiny runs
def test_resume_reads_a_finished_seed_and_continues_a_killed_one_from_its_checkpoint(tmp_path):
    """Seed 1 finished; seed 0's sweep was SIGKILLed after its second checkpoint. ``--resume`` trains
    nothing for seed 1 and continues seed 0's own MLflow run, which ends FINISHED with each iteration
    logged once (that the continued run equals an unstopped one, bit for bit, is test_determinism's)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tiny_sizes import TINY

    script = str(seed_robustness.__file__)
    sizes = [*[o for o in TINY if not o.startswith("trainer.iterations=")], "trainer.iterations=6"]
    common = ["--jobs", "1", "--root", str(tmp_path), "--name", "sweep"]
    harness = [sys.executable, script, *common]
    subprocess.run(
        [*harness, "--seeds", "1", "--first-seed", "1", "--", *sizes], check=True, capture_output=True
    )
    seed0, seed1 = tmp_path / "sweep" / "seed0", tmp_path / "sweep" / "seed1"
    before = _runs(seed1 / "mlflow.db")

    proc = subprocess.Popen(
        [*harness, "--seeds", "1", "--", *sizes],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (seed0 / "run" / "checkpoints" / "iter0001.ckpt").is_file() and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the harness and its worker
    proc.wait()
    [(run_id, status, _)], [steps] = _runs(seed0 / "mlflow.db")
    assert status == "RUNNING" and len(steps) < 6  # killed mid-run

    out = tmp_path / "rows.json"
    resume = [*harness, "--seeds", "2", "--resume", "--json", str(out), "--", *sizes]
    subprocess.run(resume, check=True, capture_output=True)
    assert _runs(seed1 / "mlflow.db") == before  # read back, not trained again
    assert _runs(seed0 / "mlflow.db")[0] == [(run_id, "FINISHED", _runs(seed0 / "mlflow.db")[0][0][2])]
    assert _runs(seed0 / "mlflow.db")[1] == [list(range(6))]
    import json

    rows = json.loads(out.read_text())["rows"]
    assert [row["seed"] for row in rows] == [0, 1]
    for row in rows:  # the curves plot_curves.py draws: an eval at every iteration (TINY), the steps growing
        assert len(row["evals"]) == len(row["eval_steps"]) == 7 and len(row["rollouts"]) == 6
        assert row["eval_steps"] == sorted(row["eval_steps"]) and row["eval_steps"][-1] > 0


def test_a_seed_composes_under_a_folder_named_after_its_overrides(tmp_path):
    """Without ``--name`` the folder is the overrides themselves (``loss.clip_low=0.2`` …): its ``=`` and
    ``,`` once made every seed fail to compose. Quoted, the run gets exactly these paths."""
    from gigpo_lab.config_paths import compose_config

    out = tmp_path / "loss=gspo_loss.clip_low=0.2_x=[1,2]_it's_${y}" / "seed4"
    cfg = compose_config(seed_robustness.seed_overrides(["loss=gspo", "loss.clip_low=0.2"], 4, out))
    assert cfg.output_dir == str(out / "run")
    assert cfg.tracking.uri == f"sqlite:///{out / 'mlflow.db'}"
    assert (cfg.seed, cfg.loss.clip_low) == (4, 0.2)


def test_a_bad_override_stops_before_any_seed_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        seed_robustness.main(["--seeds", "2", "--root", str(tmp_path), "--", "loss=nope"])
    message = str(stop.value)
    assert message.startswith("seed_robustness.py: the overrides do not compose:") and "nope" in message
    assert "gspo" in message and "ppo" in message  # the valid options
    assert "\n" not in message
    assert not any(tmp_path.rglob("mlflow.db"))  # no seed trained
