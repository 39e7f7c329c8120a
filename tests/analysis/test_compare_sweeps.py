"""Which runs ``gigpo-lab compare`` counts, on real sweeps in one store: the README's N-seed one-liner, then a
second sweep of the same configuration into the same experiment.

- the one-liner runs (with 2 seeds instead of 10) and prints the table;
- by default compare takes the latest sweep, ``--sweep`` another one, and the two are never pooled silently;
- ``--all-sweeps`` pools them, warns about every seed that ran twice and counts it once (the latest run);
- "solved k/n" and the env steps to the threshold equal what the runs' logged histories say.
"""

from __future__ import annotations

import io
import re
import shlex
import statistics
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gigpo_lab.analysis.compare import main as compare_main
from gigpo_lab.analysis.configs import group_configs
from gigpo_lab.analysis.runs import select_runs
from gigpo_lab.analysis.summary import summarize
from tests.analysis.test_compare import BIN, ROOT, TINY_SWEEP, _env, run_sweep

README = (ROOT / "README.md").read_text()
EXPERIMENT = "gigpo-lab"  # the one-liner does not name one: the default experiment


def one_liner() -> str:
    """The README's "N seeds of one config" command (from the section on sweeps and comparison)."""
    section = README.split("## Sweeps, comparison", 1)[1].split("\n## ", 1)[0]
    (line,) = [line for line in section.splitlines() if "seed='range(10)'" in line]
    return line.split("  #", 1)[0].strip()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The one-liner with 2 seeds, then a second sweep (seed 1 again) of the same configuration."""
    root = tmp_path_factory.mktemp("seeds")
    train, compare = one_liner().replace("range(10)", "range(2)").split(" && ")
    tiny = " ".join(shlex.quote(o) for o in [*TINY_SWEEP, "hydra.launcher.n_jobs=1"])
    line = f"{train} {tiny} && {compare}"
    env = _env()
    env["PATH"] = f"{BIN}:{env['PATH']}"
    first = subprocess.run(
        ["bash", "-c", line], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    overrides = [o for o in shlex.split(train)[3:] if not o.startswith("seed=")]
    _, second = run_sweep(root, EXPERIMENT, ["seed=1", *overrides, "hydra.launcher.n_jobs=1"])
    client = MlflowClient(tracking_uri=second.uri)
    parents = client.search_runs(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id],
        "tags.`gigpo_lab.role` = 'sweep-parent'",
        order_by=["attributes.start_time ASC"],
    )
    return first, second, [p.data.tags["sweep_id"] for p in parents]


def _compare(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = compare_main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_the_readme_one_liner_runs_seeds_in_parallel_and_prints_the_table(store):
    first, _, sweeps = store
    line = one_liner()
    assert (
        "hydra/launcher=local" in line and "lightning.num_threads=1" in line and "gigpo-lab compare" in line
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert re.search(r"gigpo ω=1\s+2\s+\d/2", first.stdout), first.stdout  # one configuration, n = 2
    assert "solved" in first.stdout and "IQM" in first.stdout and len(sweeps) == 2


def test_two_sweeps_are_compared_separately_by_default(store, tmp_path):
    _, second, (first_id, second_id) = store
    code, out, err = _compare("--store", second.uri, "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert "the latest sweep" in out and "1 older there" in out and not err
    assert re.search(r"gigpo ω=1\s+1\s+\d/1", out)  # seed 1 of the second sweep only
    code, out, err = _compare("--store", second.uri, "--sweep", first_id, "--out", str(tmp_path / "b"))
    assert code == 0 and re.search(r"gigpo ω=1\s+2\s+\d/2", out) and not err
    assert (tmp_path / "b" / "compare-eval_final.md").read_text().startswith(f"# Comparison: {first_id}")


def test_pooled_sweeps_count_a_repeated_seed_once_and_warn(store, tmp_path):
    _, second, _ = store
    code, out, err = _compare(
        "--store", second.uri, "--experiment", EXPERIMENT, "--all-sweeps", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert re.search(r"gigpo ω=1\s+2\s+\d/2", out), out  # seeds 0 and 1: not 3 runs
    warnings = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "seed 1 appears 2 times" in warnings[0]
    selection = select_runs(second.uri, experiment=EXPERIMENT, all_sweeps=True)
    (config,), _ = group_configs(selection.records)
    newest = {r.seed: r for r in sorted(selection.records, key=lambda r: r.start_time)}
    assert {r.seed: r.run_id for r in config.runs} == {s: r.run_id for s, r in newest.items()}
    assert len(config.dropped) == 1 and "## Warnings" in (tmp_path / "compare-eval_final.md").read_text()


def test_solved_and_steps_to_threshold_follow_the_logged_histories(store):
    """Threshold at the higher seed's final train/entropy: 1 of 2 seeds is solved, by construction."""
    _, second, (first_id, _) = store
    metric = "train/entropy"
    selection = select_runs(second.uri, sweep=first_id, metric=metric)
    client = MlflowClient(tracking_uri=second.uri)
    finals, reach = [], []
    histories = {}
    for rec in selection.records:
        values = {m.step: m.value for m in client.get_metric_history(rec.run_id, metric)}
        steps = {m.step: m.value for m in client.get_metric_history(rec.run_id, "eval/env_steps_total")}
        histories[rec.run_id] = (values, steps)
        finals.append(values[max(values)])
    threshold = max(finals)
    for values, steps in histories.values():
        hit = [steps[s] for s in sorted(values) if values[s] >= threshold]
        reach += hit[:1]
    configs, _ = group_configs(selection.records)
    (row,) = summarize(configs, metric, threshold=threshold).rows
    assert (row.solved, row.n) == (sum(f >= threshold for f in finals), 2) == (1, 2)
    assert row.reached == len(reach) and row.steps_to_threshold == pytest.approx(statistics.median(reach))
    assert Path(second.root, "mlflow.db").is_file()
