"""What ``gigpo-lab train`` prints: a header, one progress line (``gigpo_lab.cli.progress``), a summary; in a
sweep one line per finished job; and no third-party noise.

The noise is silenced where it starts, not filtered from the output:

* Hydra's own logs (``[HYDRA] Launching jobs``, the joblib launcher's settings) and the job's console log
  are WARNING and up through ``conf/hydra/hydra_logging/lab.yaml`` and ``conf/hydra/job_logging/lab.yaml``;
  the job's log file (``<output>/train.log``) keeps every INFO line.
* Lightning adds a console handler of its own to the ``lightning`` logger, which printed every message a
  second time: ``train`` removes it when the process has a logging config of its own, so Lightning's INFO
  lines (``GPU available``, the litlogger tip, ``weights_only`` ...) go through the job's logging config like
  any other.
* MLflow's loggers take ``MLFLOW_LOGGING_LEVEL`` (WARNING unless ``verbose``): no ``Creating initial MLflow
  database tables`` on a fresh store.
* Known harmless warnings are filtered by message (``NOISY_WARNINGS``), or where they arise (peft's
  ``is_gradient_checkpointing`` probe, ``policy/lora.py``).
* transformers' and huggingface_hub's progress bars (loading and writing a model) are off through their own
  switch, ``HF_HUB_DISABLE_PROGRESS_BARS``.

``verbose=true`` keeps Hydra's default logging configs and every warning. User output (these lines) goes
to stderr, as diagnostics do, so stdout stays free for what a script may parse.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

#: Warnings every run raised, none of them actionable for the user: (message regex, category).
NOISY_WARNINGS = (
    # Lightning 2.6 calls a torch.utils._pytree API that torch 2.13 deprecates; nothing the lab can change
    (r".*isinstance\(treespec, LeafSpec\)", Warning),
)


def configure_output(verbose: bool) -> None:
    """Before anything imports MLflow or Lightning: their log levels and the warning filters."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "INFO" if verbose else "WARNING")
    if verbose:
        return
    # transformers' and huggingface_hub's own switch for their tqdm bars ("Loading weights", "Writing model
    # shards"), read when they are imported; the lab's progress line says how the run goes
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for message, category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def _write(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def describe(cfg) -> str:
    """``gigpo ω=1.0`` (the estimator and, where it has one, its step-advantage weight)."""
    from gigpo_lab.training.run_names import estimator_name

    omega = cfg.estimator.get("step_advantage_weight")
    return estimator_name(cfg) + (f" ω={float(omega):g}" if omega is not None else "")


def print_header(cfg, store: str, out: Path, model: str) -> None:
    """Three lines: what runs (estimator, ω, env, model, seed, iterations), the store, the output folder."""
    _write(
        f"gigpo-lab train: {describe(cfg)} · env {cfg.env.name} · model {model} · seed {cfg.seed} · "
        f"{cfg.trainer.iterations} iterations\n  store   {store}\n  output  {out}"
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.4g}"


def print_summary(metrics: dict[str, float], uri: str, run_id: str, ckpt_dir: Path) -> None:
    """The end of a run: final success and return, wall time (of every process, for a run resumed from a
    checkpoint), where the run and its checkpoints are."""
    get = metrics.get
    _write(
        f"gigpo-lab: run finished in {get('time/wall_s', 0.0):.1f} s\n"
        f"  eval     success {_fmt(get('eval/success_rate'))}  return {_fmt(get('eval/return'))}  "
        f"length {_fmt(get('eval/length'))}\n"
        f"  rollout  success {_fmt(get('rollout/success_rate'))}  "
        f"env steps {_fmt(get('rollout/env_steps_total'))}\n"
        f"  MLflow   {uri}  (run {run_id})\n"
        f"  ckpt     {ckpt_dir}\n"
        f"  open the UI:  gigpo-lab ui --store {uri}"
    )


def print_job_line(
    cfg, job: int, metrics: dict[str, float] | None, error: BaseException | None = None, note: str = ""
) -> None:
    """One line per finished sweep job: its number, what it ran (estimator, ω, seed), final success, wall
    (and ``note``, e.g. a job a resumed sweep skipped)."""
    what = f"job {job:>2}  {describe(cfg)}  seed {cfg.seed}"
    if metrics is None:
        first = (str(error).strip().splitlines() or [""])[0][:100]
        _write(f"{what}  FAILED: {type(error).__name__}: {first}")
        return
    success = metrics.get("eval/success_rate", metrics.get("rollout/success_rate"))
    shown = "-" if success is None or success != success else f"{success:.2f}"
    _write(
        f"{what}  success {shown}  wall {metrics.get('time/wall_s', 0.0):.1f} s"
        + (f"  ({note})" if note else "")
    )


def print_sweep_header(sweep_id: str, overrides: str, uri: str, folder: str) -> None:
    """The start of a sweep: its id and overrides, the store, the output folder."""
    head = f"gigpo-lab: sweep {sweep_id}: {overrides}"
    head = head if len(head) <= 99 else head[:98] + "…"
    _write(f"{head}\n  store   {uri}\n  output  {folder}")


def print_sweep_summary(
    sweep_id: str, jobs: int, failed: int, uri: str, incomplete: str | None = None
) -> None:
    """The end of a sweep: how many jobs finished (and why it is incomplete), where the store is, and what to
    run next."""
    status = f"{jobs - failed} of {jobs} jobs finished" + (f", {failed} FAILED" if failed else "")
    status += f"; sweep FAILED: {incomplete}" if incomplete else ""
    _write(
        f"gigpo-lab: sweep {sweep_id}: {status}\n  MLflow   {uri}\n"
        f"  next:    gigpo-lab compare --sweep-id {sweep_id} --store {uri}\n"
        f"  or:      gigpo-lab ui --store {uri}"
    )
