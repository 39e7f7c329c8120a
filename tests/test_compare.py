"""``gigpo-lab compare`` on real multiruns: one parent with tagged children, a table whose numbers equal the
runs' logged metrics (read back independently), valid PNGs, artifacts on the parent, failed jobs reported.

Two tiny sweeps, each run once per test session (``shared_sweep`` caches them under pytest's base temp, so
``test_ui.py`` reuses the first): ``estimator=grpo,gigpo seed=0,1`` (4 jobs, all finish) and
``estimator.step_advantage_weight=0.0,0.5,-1.0`` (ω = -1 fails validation after its MLflow run opens).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tiny_sizes import TINY

from gigpo_lab.tracking.compare import (
    RunRecord,
    load_runs,
    report_parent,
    summarize,
    to_markdown,
    varying_columns,
    write_report,
)
from gigpo_lab.tracking.plots import mean_curve

BIN = Path(sys.executable).parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T_975 = {1: 12.706, 2: 4.303}  # printed t-table values, df = n - 1

#: A multirun this small takes about 15-25 s on 2 cores, most of it imports.
TINY_SWEEP = [*TINY, "tracking.log_checkpoint=false"]
SWEEPS = {
    "estimators": ("cmp-estimators", ["estimator=grpo,gigpo", "seed=0,1"]),
    "omega": ("cmp-omega", ["estimator=gigpo", "estimator.step_advantage_weight=0.0,0.5,-1.0"]),
}


@dataclass
class Sweep:
    root: str
    uri: str
    experiment: str
    returncode: int
    stderr_tail: str
    parent_run_id: str
    sweep_id: str


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def shared_sweep(tmp_path_factory, name: str = "estimators") -> Sweep:
    """Run the named tiny multirun once per session (in its own folder and sqlite store) and describe it."""
    root = tmp_path_factory.getbasetemp() / f"sweep-{name}"
    done = root / "sweep.json"
    if done.is_file():
        return Sweep(**json.loads(done.read_text()))
    root.mkdir(exist_ok=True)
    experiment, overrides = SWEEPS[name]
    cmd = [
        str(BIN / "gigpo-lab"),
        "train",
        "-m",
        *overrides,
        *TINY_SWEEP,
        f"tracking.experiment={experiment}",
    ]
    out = subprocess.run(cmd, cwd=root, env=_env(), capture_output=True, text=True, timeout=600)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, out.stderr[-3000:]
    (parent,) = client.search_runs([exp.experiment_id], "tags.`gigpo_lab.role` = 'sweep-parent'")
    sweep = Sweep(
        str(root),
        uri,
        experiment,
        out.returncode,
        out.stderr[-5000:],
        parent.info.run_id,
        parent.data.tags["sweep_id"],
    )
    done.write_text(json.dumps(asdict(sweep)))
    return sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Sweep:
    return shared_sweep(tmp_path_factory, "estimators")


@pytest.fixture(scope="module")
def omega_sweep(tmp_path_factory) -> Sweep:
    return shared_sweep(tmp_path_factory, "omega")


def _children(s: Sweep):
    client = MlflowClient(tracking_uri=s.uri)
    exp = client.get_experiment_by_name(s.experiment)
    runs = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{s.parent_run_id}'")
    return client, runs


def _assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(str(path))
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def _expected(values: list[float]) -> tuple[float, float, float]:
    """mean, sample std and 95% CI half width, by the textbook formula with the printed t value."""
    m, s = statistics.mean(values), statistics.stdev(values)
    return m, s, T_975[len(values) - 1] * s / math.sqrt(len(values))


def test_multirun_makes_one_parent_with_tagged_children(sweep):
    assert sweep.returncode == 0, sweep.stderr_tail
    client, runs = _children(sweep)
    parent = client.get_run(sweep.parent_run_id)
    assert parent.data.tags["gigpo_lab.role"] == "sweep-parent" and parent.info.status == "FINISHED"
    assert sorted((r.data.tags["estimator"], r.data.tags["seed"]) for r in runs) == [
        ("gigpo", "0"),
        ("gigpo", "1"),
        ("grpo", "0"),
        ("grpo", "1"),
    ]
    for run in runs:
        tags, params = run.data.tags, run.data.params
        assert run.info.status == "FINISHED" and tags["sweep_id"] == sweep.sweep_id
        assert params["seed"] == tags["seed"]
        if tags["estimator"] == "gigpo":
            assert tags["step_advantage_weight"] == "1.0"
            assert params["estimator.step_advantage_weight"] == "1.0"
        else:
            assert "step_advantage_weight" not in tags and "estimator.step_advantage_weight" not in params


@pytest.mark.parametrize("metric", ["eval/success_rate", "train/entropy"])
def test_table_numbers_equal_the_logged_metrics(sweep, metric, tmp_path):
    """Rows and Markdown cells against values read back with MlflowClient and computed by hand."""
    client, runs = _children(sweep)
    rows = summarize(load_runs(sweep.uri, sweep_id=sweep.sweep_id, metric=metric), metric)
    assert [(r.estimator, r.omega, r.n, len(r.failed)) for r in rows] == [
        ("gigpo", 1.0, 2, 0),
        ("grpo", None, 2, 0),
    ]
    markdown = to_markdown(rows, metric)
    for row in rows:
        mine = [r for r in runs if r.data.tags["estimator"] == row.estimator]
        finals = [r.data.metrics[metric] for r in mine]
        bests = [max(m.value for m in client.get_metric_history(r.info.run_id, metric)) for r in mine]
        returns = [r.data.metrics["eval/return"] for r in mine]
        for summary, values in ((row.final, finals), (row.best, bests), (row.final_return, returns)):
            m, s, half = _expected(values)
            assert (summary.n, summary.mean, summary.std) == (2, pytest.approx(m), pytest.approx(s))
            assert summary.half_width == pytest.approx(half, rel=1e-4, abs=1e-12)
            assert f"{m:.3f} ± {s:.3f}" in markdown
            assert f"[{m - half:.3f}, {m + half:.3f}]" in markdown
        steps = statistics.mean(r.data.metrics["rollout/env_steps_total"] for r in mine)
        assert row.env_steps == pytest.approx(steps)
    if metric == "train/entropy":  # a metric that differs between seeds: the check is not 0 == 0
        assert all(r.final.std > 0 for r in rows)
    written = write_report(rows, tmp_path, metric=metric)  # no parent given: files only
    assert [p.name for p in written] == ["compare.md", "learning_curves.png"]


def test_cli_writes_the_table_plots_and_parent_artifacts(sweep, tmp_path):
    out_dir = tmp_path / "report"
    cmd = [str(BIN / "gigpo-lab"), "compare", "--store", sweep.uri, "--sweep-id", sweep.sweep_id]
    out = subprocess.run(
        [*cmd, "--out", str(out_dir)], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gigpo" in out.stdout and "grpo" in out.stdout and sweep.parent_run_id in out.stdout
    md = (out_dir / "compare.md").read_text()
    assert "| estimator | ω | n | final |" in md and "| grpo |  | 2 |" in md and "No failed runs." in md
    _assert_png(out_dir / "learning_curves.png")
    assert not (out_dir / "omega_ablation.png").exists()  # one ω value only
    client = MlflowClient(tracking_uri=sweep.uri)
    logged = {Path(a.path).name for a in client.list_artifacts(sweep.parent_run_id, "compare")}
    assert {"compare.md", "learning_curves.png"} <= logged


def test_curves_average_the_seeds_at_equal_env_steps(sweep):
    records = [r for r in load_runs(sweep.uri, experiment=sweep.experiment) if r.estimator == "grpo"]
    curve = mean_curve("grpo", records, "eval/success_rate")
    client = MlflowClient(tracking_uri=sweep.uri)
    seeds = []  # each seed as sorted (env steps, value) pairs, read back independently
    for r in records:
        xs = {m.step: m.value for m in client.get_metric_history(r.run_id, "eval/env_steps_total")}
        ys = {m.step: m.value for m in client.get_metric_history(r.run_id, "eval/success_rate")}
        seeds.append(sorted((xs[s], ys[s]) for s in ys))
    assert curve.n == 2 and curve.env_steps[0] == 0
    assert curve.env_steps[-1] == min(seed[-1][0] for seed in seeds)  # no tail with fewer seeds
    for x, mean in zip(curve.env_steps, curve.mean, strict=True):
        held = [[v for xi, v in seed if xi <= x][-1] for seed in seeds]  # each seed's latest eval at x
        assert mean == pytest.approx(statistics.mean(held))


def test_a_sweep_with_a_failed_job_exits_non_zero(omega_sweep):
    assert "1 of 3 jobs" in omega_sweep.stderr_tail  # the callback did raise, after the other jobs
    assert omega_sweep.returncode != 0


def test_failed_job_is_reported_as_failed(omega_sweep, tmp_path):
    client, runs = _children(omega_sweep)
    assert client.get_run(omega_sweep.parent_run_id).info.status == "FAILED"
    status = {r.data.tags["step_advantage_weight"]: r.info.status for r in runs}
    assert status == {"0.0": "FINISHED", "0.5": "FINISHED", "-1.0": "FAILED"}
    records = load_runs(omega_sweep.uri, experiment=omega_sweep.experiment)
    assert report_parent(records) == omega_sweep.parent_run_id  # one parent: the report goes there
    rows = summarize(records)
    assert [(r.omega, r.n, len(r.failed), r.all_failed) for r in rows] == [
        (-1.0, 0, 1, True),
        (0.0, 1, 0, False),
        (0.5, 1, 0, False),
    ]
    written = write_report(rows, tmp_path, uri=omega_sweep.uri, parent_run_id=omega_sweep.parent_run_id)
    md = (tmp_path / "compare.md").read_text()
    assert "| gigpo | -1 | 0 |" in md and "1 (all: FAILED)" in md
    assert "## Failed runs" in md and "step_advantage_weight=-1.0 must be a number >= 0" in md
    assert [p.name for p in written] == ["compare.md", "learning_curves.png", "omega_ablation.png"]
    for png in written[1:]:
        _assert_png(png)
    logged = {Path(a.path).name for a in client.list_artifacts(omega_sweep.parent_run_id, "compare")}
    assert logged == {p.name for p in written}


def test_bad_selections_say_what_to_do(sweep, tmp_path):
    with pytest.raises(ValueError, match="experiments there: .*cmp-estimators"):
        load_runs(sweep.uri, experiment="no-such-experiment")
    with pytest.raises(ValueError, match="no training runs in sweep 'nope'"):
        load_runs(sweep.uri, sweep_id="nope")
    with pytest.raises(ValueError, match="no MLflow store at"):
        load_runs(f"sqlite:///{tmp_path / 'absent.db'}", experiment="x")
    assert not (tmp_path / "absent.db").exists()  # not created as a side effect
    with pytest.raises(ValueError, match="exactly one"):
        load_runs(sweep.uri)


def _record(run_id, estimator, omega, seed, status="FINISHED", env="frozenlake", **final):
    return RunRecord(run_id, run_id, status, estimator, omega, env, "tiny", str(seed), final=final)


def test_configurations_group_seeds_and_keep_every_failure():
    """Hand-made records (no store): 3 seeds, t_{0.975,2} = 4.303, env column only when envs differ."""
    values = [0.2, 0.4, 0.9]
    records = [_record(f"g{i}", "grpo", None, i, **{"eval/success_rate": v}) for i, v in enumerate(values)]
    records += [
        _record("w0", "gigpo", 0.2, 0, **{"eval/success_rate": 0.5}),
        _record("w1", "gigpo", 0.2, 1, status="RUNNING"),  # a crashed process leaves RUNNING behind
        _record("x0", "gigpo", 0.4, 0, status="FAILED"),
        _record("x1", "gigpo", 0.4, 1, status="KILLED"),
    ]
    rows = summarize(records)
    assert [(r.estimator, r.omega, r.n, len(r.failed)) for r in rows] == [
        ("gigpo", 0.2, 1, 1),
        ("gigpo", 0.4, 0, 2),
        ("grpo", None, 3, 0),
    ]
    grpo = rows[-1]
    assert grpo.final.mean == pytest.approx(0.5)
    assert grpo.final.half_width == pytest.approx(4.303 * math.sqrt(0.13) / math.sqrt(3), abs=1e-4)
    assert varying_columns(rows) == []
    md = to_markdown(rows)
    assert "| grpo |  | 3 | 0.500 ± 0.361 | [-0.396, 1.396] |" in md
    assert "| gigpo | 0.4 | 0 | — |" in md and "2 (all: FAILED)" in md
    assert "w1 (w1) RUNNING — no error tag" in md
    other_env = summarize([*records, _record("s0", "grpo", None, 0, env="sokoban")])
    assert varying_columns(other_env) == ["env"]
    assert "| estimator | ω | env | n |" in to_markdown(other_env)
