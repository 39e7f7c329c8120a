"""The output contract of ``gigpo-lab train``, from real runs through the console script (stderr is a pipe
here, so the progress line takes its plain-text form): a short header, a few progress lines, the summary,
nothing duplicated, no third-party noise; a sweep prints one line per job and a summary with the next
command; ``--help`` lists the real options; ``verbose=true`` brings the full logs back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gigpo_lab.cli.progress import MAX_WIDTH, render
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: Strings that only third-party noise prints (each was seen in a default run before it was silenced).
NOISE = (
    "GPU available",
    "TPU available",
    "litlogger",
    "LeafSpec",
    "weights_only",
    "Creating initial MLflow database tables",
    "Epoch ",
    "INFO",
    "[HYDRA]",
    "Joblib.Parallel",
)
RUN = [o for o in TINY if not o.startswith("lightning.progress_bar")]


def _train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [str(BIN / "gigpo-lab"), "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _lines(done: subprocess.CompletedProcess) -> list[str]:
    return (done.stdout + done.stderr).splitlines()


def _no_noise_no_repeats(lines: list[str]) -> None:
    for noise in NOISE:
        assert not [ln for ln in lines if noise in ln], noise
    assert len(set(lines)) == len(lines), "a line printed twice"
    # only a path (the store, the output folder) may make a line wider than 100 columns
    wide = [ln for ln in lines if len(ln) > MAX_WIDTH and "/" not in ln]
    assert not wide, wide


def test_a_default_run_prints_a_header_progress_and_a_summary(tmp_path):
    done = _train(RUN, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _lines(done)
    assert done.stdout == "", "user output goes to stderr"
    assert len(lines) <= 14, "\n".join(lines)
    _no_noise_no_repeats(lines)
    header = lines[0]
    for part in ("gigpo ω=1", "env frozenlake", "model tiny", "seed 0", "2 iterations"):
        assert part in header, header
    assert lines[1].startswith("  store   sqlite:///") and lines[2].startswith("  output  ")
    assert [ln.split()[1] for ln in lines if ln.startswith("iter ")] == ["1/2", "2/2"]
    assert any(ln.startswith("gigpo-lab: run finished in ") for ln in lines)
    assert any("gigpo-lab ui --store" in ln for ln in lines)
    assert list((tmp_path / "outputs").rglob("train.log")), "the full log is kept in the run folder"


@pytest.mark.slow  # 12 s: a whole console-script run
def test_verbose_brings_the_full_logs_back(tmp_path):
    done = _train([*RUN, "trainer.iterations=1", "verbose=true"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GPU available" in done.stdout + done.stderr


def test_a_sweep_prints_one_line_per_job_and_a_summary_with_the_next_command(tmp_path):
    done = _train(["-m", *RUN, "trainer.iterations=1", "estimator.step_advantage_weight=0.0,1.0"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _lines(done)
    assert len(lines) <= 10, "\n".join(lines)
    _no_noise_no_repeats(lines)
    jobs = sorted(ln for ln in lines if ln.startswith("job "))
    assert len(jobs) == 2
    assert "gigpo ω=0  seed 0  success " in jobs[0] and jobs[0].endswith(" s")
    assert "gigpo ω=1  seed 0  success " in jobs[1]
    assert any(ln.endswith(": 2 of 2 jobs finished") for ln in lines)
    assert any(ln.startswith("  next:    gigpo-lab compare --sweep-id ") for ln in lines)
    assert sum("gigpo-lab ui" in ln for ln in lines) == 1, "the UI hint once, not once per job"

    # what MLflow's UI shows: a model-training experiment, short run names that lead with ω and seed,
    # a parent run whose description holds the overrides and the compare command
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "gigpo-lab"]
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([exp.experiment_id])
    names = sorted(r.info.run_name for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert names == ["gigpo-w0-s0-frozenlake", "gigpo-w1-s0-frozenlake"]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    note = parent.data.tags["mlflow.note.content"]
    assert "estimator.step_advantage_weight=0.0,1.0" in note
    assert f"gigpo-lab compare --sweep-id {parent.data.tags['sweep_id']}" in note


def test_help_lists_groups_experiments_sweeps_and_examples(tmp_path):
    done = _train(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert (
        "  estimator    gigpo (default), gigpo_step_index, graphgpo, grpo, hgpo, ppo, reinforce_pp, rloo"
        in text
    )
    assert "  lightning    cpu (default), ddp, fsdp, gpu" in text
    for name in ("gigpo_vs_grpo", "step_weight_ablation", "estimators", "step_weight"):
        assert f"\n  {name} " in text, name
    assert text.count("\n  gigpo-lab train ") == 3, "three examples"
    assert "_schema" not in text
    assert max(len(ln) for ln in text.splitlines()) <= MAX_WIDTH


@given(
    total=st.integers(1, 100_000),
    data=st.data(),
    success=st.floats(0, 1),
    tokens=st.floats(0, 1e9),
    elapsed=st.floats(0.01, 1e6),
    width=st.integers(20, 400),
    bar=st.booleans(),
)
def test_the_progress_line_fits_its_width_and_counts_from_one(
    total, data, success, tokens, elapsed, width, bar
):
    it = data.draw(st.integers(1, total))
    metrics = {
        "rollout/success_rate": success,
        "perf/tokens_per_s": tokens,
        "eval/success_rate": float("nan"),
    }
    text = render(it, total, metrics, elapsed, min(width, MAX_WIDTH), bar)
    assert len(text) <= min(width, MAX_WIDTH) and "\n" not in text
    assert text.startswith(f"iter {it:>{len(str(total))}}/{total}"[: len(text)])


@pytest.mark.slow  # 22 s: a tiny HF model with LoRA through the console script
def test_an_llm_run_prints_only_the_labs_lines(tmp_path):
    """A Hugging Face policy with LoRA and gradient checkpointing (issue #63): no 'Loading weights' or 'Writing
    model shards' bar from transformers, no FutureWarning from peft's probe of ``is_gradient_checkpointing``."""
    from tests.hf_tiny import build_tiny_hf_model

    model = build_tiny_hf_model(tmp_path / "model")
    args = [*RUN, "trainer.iterations=1", "model=hf", f"model.path={model}", "model.lora.enabled=true",
            "model.gradient_checkpointing=true", "env.max_turns=3"]  # fmt: skip
    done = _train(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _lines(done)
    for noise in (
        "Loading weights",
        "Writing model shards",
        "is_gradient_checkpointing",
        "FutureWarning",
        "it/s]",
    ):
        assert not [ln for ln in lines if noise in ln], noise
    _no_noise_no_repeats(lines)
    assert any(ln.startswith("gigpo-lab: run finished in ") for ln in lines)
