"""One MLflow parent run per Hydra multirun, with every job a nested child run.

``MlflowSweepCallback`` is a Hydra callback (``hydra.callbacks`` in ``conf/config.yaml``). Before the
first job it creates the parent run and exports its id and the sweep id in the environment, which the
jobs inherit whatever the launcher (in-process, joblib workers, submitit/SLURM with the default
``--export=ALL``). After the last job it tags the parent with the jobs' outcome and closes it; if any job
failed, it marks the parent FAILED and records the failure, and ``gigpo-lab train`` exits non-zero once
every other job has finished.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gigpo_lab.tracking.mlflow_tracker import NOTE_TAG, experiment_view

PARENT_ENV = "GIGPO_LAB_PARENT_RUN_ID"
SWEEP_ENV = "GIGPO_LAB_SWEEP_ID"
ROLE_TAG = "gigpo_lab.role"

log = logging.getLogger(__name__)

#: Failure messages of the sweeps this process ran. Hydra 1.3 turns an exception raised in a callback into a
#: warning, so ``gigpo_lab.train.main`` reads this after Hydra returns and exits non-zero.
FAILED_SWEEPS: list[str] = []
#: Parent runs this process opened and has not closed yet (``fail_open_sweeps`` ends them if the launch dies).
OPEN_PARENTS: list = []


def sweep_context() -> tuple[str | None, str | None]:
    """``(parent_run_id, sweep_id)`` when this process is a job of a tracked sweep, else ``(None, None)``."""
    return os.environ.get(PARENT_ENV), os.environ.get(SWEEP_ENV)


def _default_uri() -> str:
    from gigpo_lab.tracking.mlflow_tracker import default_tracking_uri

    return default_tracking_uri()


def _tracker(config: DictConfig, **kwargs: Any):
    from gigpo_lab.tracking.mlflow_tracker import MlflowTracker, default_tracking_uri

    uri = config.tracking.uri or default_tracking_uri()
    return MlflowTracker(uri, config.tracking.experiment, **kwargs)


class MlflowSweepCallback(Callback):
    """Create the sweep's parent run before the jobs, and close it after them."""

    def __init__(self) -> None:
        self.tracker = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        choices = config.hydra.runtime.choices
        label = choices.get("experiments") or choices.get("sweeps") or "multirun"
        sweep_id = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        params = {k: str(v) for k, v in (config.hydra.sweeper.get("params") or {}).items()}
        overrides = " ".join(config.hydra.overrides.task)
        tags = {ROLE_TAG: "sweep-parent", "sweep_id": sweep_id, "sweep": label, "sweep_overrides": overrides}
        uri = config.tracking.uri or _default_uri()
        tags[NOTE_TAG] = (  # the run's description in MLflow's UI
            f"Sweep `{label}`: one child run per job.\n\n```\ngigpo-lab train {overrides}\n```\n\n"
            f"Compare the jobs (IQM, CIs, plots):\n\n```\ngigpo-lab compare --sweep-id {sweep_id} "
            f"--store {uri}\n```\n"
        )
        # a short display name (the UI's name column is narrow); the full id is the sweep_id tag
        self.tracker = _tracker(config, run_name=f"{label} {time.strftime('%H:%M')}", tags=tags)
        self.tracker.check_reachable()
        run_id = self.tracker.start()
        OPEN_PARENTS.append(self.tracker)
        _exit_on_sigterm()
        if params:
            # "+group=a,b" / "~key" sweep keys: MLflow param names may not contain '+' or '~'
            self.tracker.log_params({f"sweep.{k.lstrip('+~')}": v for k, v in params.items()})
        # a saved view of the runs table named after the sweep: its runs, with ω, estimator, seed, eval success
        # and the swept keys as columns (``gigpo-lab ui`` prints the URL that opens it)
        swept = tuple(k.lstrip("+~") for k in params)
        view = experiment_view(f"tags.sweep_id = '{sweep_id}'", swept)
        self.tracker.save_view(sweep_id, f"sweep {label} {time.strftime('%Y-%m-%d %H:%M')}", view)
        os.environ[PARENT_ENV], os.environ[SWEEP_ENV] = run_id, sweep_id
        log.info("MLflow sweep parent run %s (sweep id %s)", run_id, sweep_id)
        from gigpo_lab.cli.console import print_sweep_header

        print_sweep_header(sweep_id, overrides, self.tracker.uri, str(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.tracker is None or self.tracker not in OPEN_PARENTS:
            return
        sweep_id = os.environ.pop(SWEEP_ENV, None)
        os.environ.pop(PARENT_ENV, None)
        client = self.tracker.client
        exp = client.get_experiment_by_name(self.tracker.experiment)
        children = client.search_runs(
            [exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.tracker.run_id}'"
        )
        statuses = [r.info.status for r in children]
        failed = sum(s != "FINISHED" for s in statuses)
        self.tracker.set_tags({"jobs": len(statuses), "jobs_failed": failed})
        self.tracker.end("FAILED" if failed else "FINISHED")
        OPEN_PARENTS.remove(self.tracker)  # only now: a SIGTERM before this line still finds it open
        from gigpo_lab.cli.console import print_sweep_summary

        print_sweep_summary(sweep_id, len(statuses), failed, self.tracker.uri)
        if failed:
            FAILED_SWEEPS.append(
                f"{failed} of {len(statuses)} jobs of sweep {sweep_id} failed; the others finished. "
                f"See `gigpo-lab compare --sweep-id {sweep_id}` and each failed run's log"
            )


class Terminated(SystemExit):
    """SIGTERM reached the sweep's launcher process (``kill``, a job scheduler's time limit)."""

    def __str__(self) -> str:
        return "the sweep's launcher received SIGTERM"


#: Set when SIGTERM reached this launcher: ``gigpo_lab.train.main`` then exits 143 even if the exception below
#: was swallowed on its way up (Hydra turns exceptions inside its callbacks into warnings).
TERMINATED: list[Terminated] = []


def _raise_terminated(signum: int, frame: Any) -> None:
    """Record the signal and raise; ``gigpo_lab.train.main`` ends the parent run FAILED once the stack has
    unwound. Not here: the handler runs on the main thread between two bytecodes of whatever it was doing,
    which may be a write to the same sqlite store (a job's child run logging an iteration). That write holds
    the store's lock until it unwinds, so a write from here waited out MLflow's 20-second busy timeout, failed,
    and left the parent RUNNING (the flaky ``test_sigterm_to_the_launcher_ends_its_parent_run_failed``)."""
    err = Terminated(128 + signum)
    TERMINATED.append(err)
    raise err


def _exit_on_sigterm() -> None:
    """In the launcher, SIGTERM becomes an exception (exit code 143), so that ``gigpo_lab.train.main`` ends
    the open parent run FAILED with the reason; Python's default would end the process with no cleanup and
    leave the parent RUNNING. Only when nothing else handles SIGTERM (Lightning installs its own in a run)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, _raise_terminated)


def fail_open_sweeps(err: BaseException) -> None:
    """End every parent run still open in this process FAILED, with the reason in its ``error`` tag: the
    launcher died before the jobs ran (e.g. ``hydra/launcher=slurm`` where there is no ``sbatch``), so Hydra
    never calls ``on_multirun_end``, or SIGTERM stopped it. No run is ever left RUNNING.

    A parent run that cannot be ended now (its store is locked or gone) stays in ``OPEN_PARENTS``, so that a
    later call can still end it."""
    for env in (PARENT_ENV, SWEEP_ENV):
        os.environ.pop(env, None)
    for tracker in list(OPEN_PARENTS):
        try:
            tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
            tracker.end("FAILED")
        except Exception:  # the store is locked or went away: the run stays open for a later call
            log.exception("could not mark the sweep parent run %s FAILED", tracker.run_id)
        else:
            OPEN_PARENTS.remove(tracker)
