"""``gigpo-lab compare`` on real multiruns: one parent with tagged children, a table whose numbers equal the
runs' logged metrics (read back independently), valid PNGs named after the metric, artifacts on the parent,
failed jobs reported.

Two tiny sweeps, each run once per test session (``shared_sweep`` caches them under pytest's base temp, so
``test_ui.py`` and ``test_compare_sweeps.py`` reuse them): ``estimator=grpo,gigpo seed=0,1`` (4 jobs, all
finish) and ``estimator.step_advantage_weight=0.0,0.5,-1.0`` (ω = -1 fails validation after its run opens).
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tiny_sizes import TINY

from gigpo_lab.analysis.compare import main as compare_main
from gigpo_lab.analysis.configs import group_configs
from gigpo_lab.analysis.plots import learning_curve
from gigpo_lab.analysis.report import print_table, to_markdown
from gigpo_lab.analysis.runs import RunRecord, select_runs
from gigpo_lab.analysis.summary import summarize

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

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
    """The environment of a user's shell, importing gigpo_lab from this checkout (not another editable one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_sweep(root: Path, experiment: str, overrides: list[str]) -> tuple[subprocess.CompletedProcess, Sweep]:
    """Run one tiny multirun into ``root/mlflow.db`` (cwd ``root``); describe its newest sweep parent."""
    root.mkdir(parents=True, exist_ok=True)
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
    parents = client.search_runs(
        [exp.experiment_id], "tags.`gigpo_lab.role` = 'sweep-parent'", order_by=["attributes.start_time DESC"]
    )
    parent = parents[0]
    sweep = Sweep(
        str(root),
        uri,
        experiment,
        out.returncode,
        out.stderr[-5000:],
        parent.info.run_id,
        parent.data.tags["sweep_id"],
    )
    return out, sweep


def shared_sweep(tmp_path_factory, name: str = "estimators") -> Sweep:
    """Run the named tiny multirun once per test session (in its own folder and sqlite store) and describe it.
    Under xdist the workers share it: it lives beside their own temp folders, and the first to need it runs it
    while a lock holds the other back (each used to run its own copy, 15-20 CPU-seconds)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root, done = base / f"sweep-{name}", base / f"sweep-{name}" / "sweep.json"
    with FileLock(str(base / f"sweep-{name}.lock")):
        if done.is_file():
            return Sweep(**json.loads(done.read_text()))
        experiment, overrides = SWEEPS[name]
        _, sweep = run_sweep(root, experiment, overrides)
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


def assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(str(path))
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def _summary(s: Sweep, metric: str, **kwargs):
    selection = select_runs(s.uri, sweep=s.sweep_id, metric=metric)
    configs, warnings = group_configs(selection.records)
    return selection, summarize(configs, metric, **kwargs), warnings


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
def test_table_numbers_equal_the_logged_metrics(sweep, metric):
    """Rows and Markdown cells against values read back with MlflowClient and computed by hand.

    With two seeds a, b the IQM is the mean, and the 95% percentile-bootstrap CI is exactly [min, max]
    (resampled means a, (a+b)/2, b with probability ¼, ½, ¼).
    """
    client, runs = _children(sweep)
    selection, summary, warnings = _summary(sweep, metric, baseline="grpo")
    assert selection.parent_run_id == sweep.parent_run_id and not warnings
    rows = summary.rows
    assert [(r.label, r.n, len(r.config.failed)) for r in rows] == [("gigpo ω=1", 2, 0), ("grpo", 2, 0)]
    markdown = to_markdown(summary)
    for row in rows:
        mine = [r for r in runs if r.data.tags["estimator"] == row.config.estimator]
        finals = [r.data.metrics[metric] for r in mine]
        histories = [[m.value for m in client.get_metric_history(r.info.run_id, metric)] for r in mine]
        lo, hi, mean = min(finals), max(finals), statistics.fmean(finals)
        for e in (row.iqm, row.mean):
            assert (e.value, e.low, e.high) == (pytest.approx(mean), pytest.approx(lo), pytest.approx(hi))
        assert f"{mean:.3f} [{lo:.3f}, {hi:.3f}]" in markdown
        aucs = [statistics.fmean(h) for h in histories]
        assert row.auc.value == pytest.approx(statistics.fmean(aucs))
        assert row.best.value == pytest.approx(statistics.fmean(max(h) for h in histories))
        assert row.solved == sum(f >= 0.8 for f in finals)
        steps = statistics.fmean(r.data.metrics["rollout/env_steps_total"] for r in mine)
        assert row.env_steps == pytest.approx(steps)
    grpo, gigpo = rows[1], rows[0]
    assert grpo.is_baseline and "| grpo | 2 |" in markdown and "| baseline |" in markdown
    wins = [(a > b) + 0.5 * (a == b) for a in gigpo.scores for b in grpo.scores]
    assert gigpo.poi.value == pytest.approx(statistics.fmean(wins))
    if metric == "train/entropy":  # a metric that differs between seeds: the check is not 0 == 0
        assert all(r.iqm.high > r.iqm.low for r in rows)


def test_the_terminal_table_fits_100_columns_and_wide_shows_more(sweep):
    _, summary, _ = _summary(sweep, "train/entropy")
    narrow, wide = io.StringIO(), io.StringIO()
    print_table(summary, "a title", file=narrow)
    print_table(summary, "a title", wide=True, file=wide)
    lines = narrow.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "train/entropy" in lines[0] and "solved" in narrow.getvalue() and "gigpo ω=1" in narrow.getvalue()
    for row in summary.rows:
        assert f"{row.iqm.value:.3f}" in narrow.getvalue()
        assert f"{row.iqm.low:.2f}–{row.iqm.high:.2f}" in narrow.getvalue()
    assert "seeds" not in narrow.getvalue() and "seeds" in wide.getvalue() and "env steps" in wide.getvalue()


def test_cli_writes_the_table_plots_and_parent_artifacts(sweep, tmp_path):
    """Through the console script, on the default metric eval/final (the runs log it); a second metric writes
    beside the first, overwriting nothing."""
    out_dir = tmp_path / "report"
    cmd = [str(BIN / "gigpo-lab"), "compare", "--store", sweep.uri, "--sweep", sweep.parent_run_id]
    out = subprocess.run(
        [*cmd, "--out", str(out_dir)], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gigpo ω=1" in out.stdout and "grpo" in out.stdout and sweep.parent_run_id in out.stdout
    md = (out_dir / "compare-eval_final.md").read_text()
    assert "| configuration | n | solved ≥0.8 |" in md and "| grpo | 2 | " in md and "No failed runs." in md
    assert "Metric `eval/final`" in md and "## Paired contrasts" in md
    pngs = {"learning_curves", "aggregate", "improvement", "profile"}
    for name in pngs:
        assert_png(out_dir / f"{name}-eval_final.png")
    assert not list(out_dir.glob("omega_ablation-*"))  # one ω value only
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    again = [*cmd[2:], "--out", str(out_dir), "--metric", "train/entropy"]
    with redirect_stdout(io.StringIO()):
        assert compare_main(again) == 0  # in-process: the console script was shown above
    assert {p.name: p.read_bytes() for p in out_dir.iterdir() if p.name in before} == before
    assert (out_dir / "compare-train_entropy.md").is_file()
    client = MlflowClient(tracking_uri=sweep.uri)
    logged = {Path(a.path).name for a in client.list_artifacts(sweep.parent_run_id, "compare")}
    expected = {f"{n}-{m}.png" for n in pngs for m in ("eval_final", "train_entropy")}
    assert (
        expected | {"compare-eval_final.md", "compare-train_entropy.md", "per_seed-eval_final.json"} <= logged
    )


def test_curves_take_the_iqm_of_the_seeds_at_equal_env_steps(sweep):
    selection = select_runs(sweep.uri, experiment=sweep.experiment, metric="train/entropy")
    records = [r for r in selection.records if r.estimator == "grpo"]
    curve = learning_curve("grpo", records, "train/entropy")
    client = MlflowClient(tracking_uri=sweep.uri)
    seeds = []  # each seed as sorted (env steps, value) pairs, read back independently
    for r in records:
        xs = {m.step: m.value for m in client.get_metric_history(r.run_id, "eval/env_steps_total")}
        ys = {m.step: m.value for m in client.get_metric_history(r.run_id, "train/entropy")}
        seeds.append(sorted((xs[s], ys[s]) for s in ys))
    assert curve.n == 2 and curve.env_steps and curve.x[0] == 0
    assert curve.x[-1] == min(seed[-1][0] for seed in seeds)  # no tail with fewer seeds
    for x, iqm, low, high in zip(curve.x, curve.iqm, curve.low, curve.high, strict=True):
        held = [[v for xi, v in seed if xi <= x][-1] for seed in seeds]  # each seed's latest eval at x
        assert iqm == pytest.approx(statistics.fmean(held))  # the IQM of two values is their mean
        assert (low, high) == (pytest.approx(min(held)), pytest.approx(max(held)))


def test_curves_of_several_envs_get_one_panel_each(sweep, tmp_path):
    import matplotlib.image

    from gigpo_lab.analysis.plots import learning_curves

    selection = select_runs(sweep.uri, experiment=sweep.experiment, metric="eval/success_rate")
    curves = [
        learning_curve(name, [r for r in selection.records if r.estimator == name], "eval/success_rate")
        for name in ("grpo", "gigpo")
    ]
    one = learning_curves(curves, "eval/success_rate", tmp_path / "one.png")
    two = learning_curves(curves, "eval/success_rate", tmp_path / "two.png", panels=["env a", "env b"])
    three = learning_curves(
        [*curves, curves[0]], "eval/success_rate", tmp_path / "three.png", panels=["a", "b", "c"]
    )
    widths = [matplotlib.image.imread(str(p)).shape[1] for p in (one, two, three)]
    # one plot is 7 in wide, n panels 4.5 in each: at the same dpi the widths follow
    assert widths[1] / widths[0] == pytest.approx(9.0 / 7.0, rel=0.02)
    assert widths[2] / widths[0] == pytest.approx(13.5 / 7.0, rel=0.02)


def test_a_sweep_with_a_failed_job_exits_non_zero(omega_sweep):
    assert "1 of 3 jobs" in omega_sweep.stderr_tail  # the callback did raise, after the other jobs
    assert omega_sweep.returncode != 0


def test_failed_job_is_reported_as_failed(omega_sweep, tmp_path):
    from gigpo_lab.analysis.compare import write_report

    client, runs = _children(omega_sweep)
    assert client.get_run(omega_sweep.parent_run_id).info.status == "FAILED"
    status = {r.data.tags["step_advantage_weight"]: r.info.status for r in runs}
    assert status == {"0.0": "FINISHED", "0.5": "FINISHED", "-1.0": "FAILED"}
    selection, summary, _ = _summary(omega_sweep, "eval/success_rate")
    assert selection.parent_run_id == omega_sweep.parent_run_id  # the report goes to the sweep's parent
    assert [(r.config.omega, r.n, len(r.config.failed), r.all_failed) for r in summary.rows] == [
        (-1.0, 0, 1, True),
        (0.0, 1, 0, False),
        (0.5, 1, 0, False),
    ]
    assert any("no configuration matches the baseline 'grpo'" in n for n in summary.notes)
    written = write_report(summary, tmp_path, uri=omega_sweep.uri, parent_run_id=omega_sweep.parent_run_id)
    md = (tmp_path / "compare-eval_success_rate.md").read_text()
    assert "| gigpo ω=-1 | 0 | 0/0 |" in md and "| 1 (all) |" in md
    assert "## Failed runs" in md and "estimator.step_advantage_weight=-1.0 is not allowed" in md
    names = [p.name for p in written]
    assert names[:2] == ["compare-eval_success_rate.md", "per_seed-eval_success_rate.json"]
    assert "omega_ablation-eval_success_rate.png" in names
    assert "improvement-eval_success_rate.png" not in names  # no baseline, no P(>base)
    for png in written[2:]:
        assert_png(png)
    logged = {Path(a.path).name for a in client.list_artifacts(omega_sweep.parent_run_id, "compare")}
    assert logged == set(names)


def test_bad_selections_say_what_to_do(sweep, tmp_path):
    with pytest.raises(ValueError, match="experiments there: .*cmp-estimators"):
        select_runs(sweep.uri, experiment="no-such-experiment")
    with pytest.raises(ValueError, match=f"no sweep 'nope'.*latest sweeps there: {sweep.sweep_id}"):
        select_runs(sweep.uri, sweep="nope")
    with pytest.raises(ValueError, match="no MLflow store at"):
        select_runs(f"sqlite:///{tmp_path / 'absent.db'}", experiment="x")
    assert not (tmp_path / "absent.db").exists()  # not created as a side effect
    with pytest.raises(ValueError, match="did you mean eval/success_rate"):
        select_runs(sweep.uri, sweep=sweep.sweep_id, metric="eval/sucess_rate")
    with pytest.raises(ValueError, match="--all-sweeps pools every run of one experiment"):
        select_runs(sweep.uri, all_sweeps=True)
    _, runs = _children(sweep)
    with pytest.raises(ValueError, match="is not a sweep's parent run"):
        select_runs(sweep.uri, sweep=runs[0].info.run_id)


def _record(run_id: str, seed: int, status: str = "FINISHED", start: int = 0, **params) -> RunRecord:
    estimator = params.pop("estimator", "gigpo")
    tags = {
        "estimator": estimator,
        "env": params.get("env.name", "frozenlake"),
        "model": "tiny",
        "seed": str(seed),
    }
    if estimator == "gigpo":
        params.setdefault("estimator.step_advantage_weight", "1.0")
        tags["step_advantage_weight"] = params["estimator.step_advantage_weight"]
    full = {"seed": str(seed), "model.seed": str(seed), "output_dir": f"/out/{run_id}", **params}
    full["estimator._target_"] = estimator
    return RunRecord(run_id, run_id, status, start, tags, full, final={"eval/success_rate": 0.5})


def test_a_configuration_is_every_differing_setting_but_the_seed():
    """Hand-made records: the tutorial's pooling bug (research and default runs in one row, seed 0 three times)."""
    records = [
        _record("d0", 0, start=1),
        _record("d1", 1, start=2),
        _record("r0", 0, start=3, **{"loss.kl_coef": "0.01"}),  # a research-config run
        _record("d0-again", 0, start=4),  # seed 0 of the default config once more
        _record("g0", 0, start=5, estimator="grpo"),
        _record("f1", 1, status="RUNNING", start=6, estimator="grpo"),  # a crashed process leaves RUNNING
    ]
    for r in records:
        r.params.setdefault("loss.kl_coef", "0.0")
    configs, warnings = group_configs(records)
    assert [(c.label, [r.run_id for r in c.runs]) for c in configs] == [
        ("gigpo ω=1 loss.kl_coef=0.0", ["d0-again", "d1"]),
        ("gigpo ω=1 loss.kl_coef=0.01", ["r0"]),
        ("grpo loss.kl_coef=0.0", ["g0", "f1"]),
    ]
    (warning,) = warnings
    assert "seed 0 appears 2 times" in warning and "d0-again" in warning and "not counted: d0" in warning
    assert [r.run_id for r in configs[0].dropped] == ["d0"]
    assert [r.run_id for r in configs[2].failed] == ["f1"]
    # the seed, the seed-derived model.seed and the output folder never split a configuration
    assert all("seed" not in c.label and "output_dir" not in c.label for c in configs)


def test_across_envs_the_strata_are_the_envs():
    """Hand-made finals in two envs: methods get stratified IQM/mean and P(>base) averaged over the envs."""
    records = []
    values = {("gigpo", "a"): [0.6, 0.7, 0.8], ("gigpo", "b"): [0.9, 1.0, 1.0]}
    values |= {("grpo", "a"): [0.1, 0.2, 0.3], ("grpo", "b"): [0.9, 1.0, 1.0]}
    for (estimator, env), finals in values.items():
        for seed, v in enumerate(finals):
            rec = _record(f"{estimator}{env}{seed}", seed, estimator=estimator, **{"env.name": env})
            rec.final = {"eval/success_rate": v}
            records.append(rec)
    configs, _ = group_configs(records)
    summary = summarize(configs, "eval/success_rate")
    assert [r.label for r in summary.rows] == ["gigpo ω=1 a", "gigpo ω=1 b", "grpo a", "grpo b"]
    assert [r.poi.value for r in summary.rows[:2]] == [1.0, 0.5]
    gigpo, grpo = summary.methods
    assert (gigpo.label, gigpo.n, gigpo.poi.value) == ("gigpo ω=1", 6, 0.75)
    assert gigpo.mean.value == pytest.approx(statistics.fmean([0.6, 0.7, 0.8, 0.9, 1.0, 1.0]))
    assert grpo.is_baseline and "| gigpo ω=1 | 2 | 6 |" in to_markdown(summary)
    shown = io.StringIO()
    print_table(summary, "a title that is rather long " * 3, file=shown)
    assert "across envs" in shown.getvalue() and max(map(len, shown.getvalue().splitlines())) <= 100
