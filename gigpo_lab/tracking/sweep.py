"""One MLflow parent run per Hydra multirun, with every job a nested child run.

``MlflowSweepCallback`` is a Hydra callback (``hydra.callbacks`` in ``conf/config.yaml``). Before the
first job it creates the parent run and exports its id and the sweep id in the environment, which the
jobs inherit whatever the launcher (in-process, joblib workers, submitit/SLURM with the default
``--export=ALL``). After the last job it tags the parent with the jobs' outcome and closes it; if any job
failed, or did not run (a SIGTERM, a launcher that stopped early), it marks the parent FAILED with the reason.

What the launcher learns on the way (the parent runs still open, each sweep's outcome, a SIGTERM) is kept in
one ``SweepState``, made by ``gigpo-lab train`` (``gigpo_lab.cli.train``) and read by it once Hydra returns: it
prints, and exits non-zero when a sweep had failed jobs. This module prints nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from gigpo_lab.tracking.mlflow_tracker import NOTE_TAG, experiment_view
from gigpo_lab.tracking.sweep_env import PARENT_ENV, ROLE_TAG, SWEEP_ENV
from gigpo_lab.tracking.sweep_resume import (
    SweepStillRunning,
    all_runs,
    latest_runs,
    parent_to_resume,
    without_resume,
)
from gigpo_lab.tracking.unwound import release_unwound_frames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepStarted:
    """The parent run is open, before the first job."""

    sweep_id: str
    overrides: str
    uri: str
    folder: str


@dataclass(frozen=True)
class SweepEnded:
    """The last job has finished and the parent run is closed."""

    sweep_id: str | None
    jobs: int
    failed: int
    uri: str
    #: Why the sweep is incomplete beyond its failed jobs (SIGTERM, jobs that never ran), else ``None``.
    incomplete: str | None = None

    @property
    def failure(self) -> str | None:
        """One sentence when some jobs failed or the sweep is incomplete, else ``None``."""
        if not self.failed and not self.incomplete:
            return None
        said = f"{self.failed} of {self.jobs} jobs of sweep {self.sweep_id} failed"
        said += f"; {self.incomplete}" if self.incomplete else "; the others finished"
        return f"{said}. See `gigpo-lab compare --sweep-id {self.sweep_id}` and each failed run's log"


def _log_event(event: SweepStarted | SweepEnded) -> None:
    log.info("%s", event)


class Terminated(SystemExit):
    """SIGTERM reached the sweep's launcher process (``kill``, a job scheduler's time limit)."""

    def __str__(self) -> str:
        return "the sweep's launcher received SIGTERM"


@dataclass
class SweepState:
    """What one launcher process learns while Hydra runs its sweeps.

    Hydra 1.3 turns an exception raised in a callback into a warning, so what must change the command's exit
    status is recorded here and read after Hydra returns.

    Args:
        notify: called with ``SweepStarted`` before the first job and ``SweepEnded`` after the last (the CLI
            prints them; by default they are logged).
    """

    notify: Callable[[SweepStarted | SweepEnded], None] = _log_event
    #: Parent runs opened and not closed yet (``fail_open_sweeps`` ends them if the launch dies).
    open_parents: list = field(default_factory=list)
    #: The run ids of those parents whose jobs run on this machine (in process or in joblib workers), and so
    #: stop with the launcher; a SLURM job goes on without it.
    local_parents: set[str] = field(default_factory=set)
    #: Every sweep that ran to its end, with its jobs' outcome.
    ended: list[SweepEnded] = field(default_factory=list)
    #: Set when SIGTERM reached the launcher: the command then exits 143 even if the exception was swallowed
    #: on its way up (inside a Hydra callback).
    terminated: Terminated | None = None

    def stop_if_terminated(self) -> None:
        """Raise the recorded SIGTERM again, if one landed: a signal whose exception was swallowed on its way up
        (raised inside a finalizer, where Python prints "Exception ignored" and carries on) must still stop
        the sweep before its next job."""
        if self.terminated is not None:
            raise self.terminated

    def failures(self) -> list[str]:
        """A sentence for each sweep with failed jobs."""
        return [e.failure for e in self.ended if e.failure]

    def raise_terminated(self, signum: int, frame: Any) -> None:
        """The SIGTERM handler: record the signal and raise; the command ends the parent run FAILED once the
        stack has unwound (``fail_open_sweeps``). Not here: the handler runs on the main thread between two
        bytecodes of whatever it was doing, which may be a write to the same sqlite store (a job's child run
        logging an iteration). That write holds the store's lock until it unwinds, so a write from here waited
        out MLflow's 20-second busy timeout, failed, and left the parent RUNNING (the flaky
        ``test_sigterm_to_the_launcher_ends_its_parent_run_failed``).

        The raised exception may also never arrive: Python swallows an exception raised inside a finalizer
        (``__del__``, a weakref callback such as SQLAlchemy's pool finalizers, which run in the middle of the
        store's writes) and prints "Exception ignored". That was the FINISHED-after-SIGTERM race: the signal
        landed after the first job's fit (Lightning's handler gone), inside a finalizer; the job ended its run
        FINISHED, the second job ran to its end, and ``on_multirun_end`` saw every child FINISHED and closed the
        parent FINISHED, while the command still exited 143 from this flag. So the flag, not the exception, is
        the truth: no job starts once it is set (``stop_if_terminated``), and a parent closed after it is
        FAILED (``MlflowSweepCallback._incomplete``)."""
        self.terminated = Terminated(128 + signum)
        raise self.terminated


#: The state of the ``gigpo-lab train`` call in progress (``sweep_scope``). Hydra builds the callback from its
#: YAML entry and cannot hand it an object, so the command binds its state here for the length of that one
#: call; outside it each callback keeps a state of its own.
_CURRENT: ContextVar[SweepState | None] = ContextVar("gigpo_lab_sweep_state", default=None)


@contextlib.contextmanager
def sweep_scope(state: SweepState) -> Iterator[SweepState]:
    """Within this block, the sweep callbacks Hydra builds record into ``state``; SIGTERM's handler is put
    back as it was afterwards (``_exit_on_sigterm`` replaces it for the sweep)."""
    token = _CURRENT.set(state)
    on_main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if on_main else None
    try:
        yield state
    finally:
        _CURRENT.reset(token)
        if on_main:
            signal.signal(signal.SIGTERM, handler if handler is not None else signal.SIG_DFL)


def _default_uri() -> str:
    from gigpo_lab.tracking.mlflow_tracker import default_tracking_uri

    return default_tracking_uri()


def _tracker(config: DictConfig, **kwargs: Any):
    from gigpo_lab.tracking.mlflow_tracker import MlflowTracker, default_tracking_uri

    uri = config.tracking.uri or default_tracking_uri()
    return MlflowTracker(uri, config.tracking.experiment, **kwargs)


class MlflowSweepCallback(Callback):
    """Create the sweep's parent run before the jobs, and close it after them.

    Args:
        state: where to record what happened (default: the one ``sweep_scope`` binds, else a new one).
    """

    def __init__(self, state: SweepState | None = None) -> None:
        self.tracker = None
        self.state = state or _CURRENT.get() or SweepState()
        #: The number of jobs the sweeper will launch, when it can be known in advance (``planned_jobs``).
        self.planned: int | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        choices = config.hydra.runtime.choices
        label = choices.get("experiments") or choices.get("sweeps") or "multirun"
        sweep_id = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        params = {k: str(v) for k, v in (config.hydra.sweeper.get("params") or {}).items()}
        overrides = " ".join(without_resume(config.hydra.overrides.task))
        self.planned = planned_jobs(config)
        if config.get("resume") and self._reopen(config, overrides):
            return
        tags = {ROLE_TAG: "sweep-parent", "sweep_id": sweep_id, "sweep": label, "sweep_overrides": overrides}
        uri = config.tracking.uri or _default_uri()
        tags[NOTE_TAG] = (  # the run's description in MLflow's UI
            f"Sweep `{label}`: one child run per job.\n\n```\ngigpo-lab train {overrides}\n```\n\n"
            f"Compare the jobs (IQM, CIs, plots):\n\n```\ngigpo-lab compare --sweep-id {sweep_id} "
            f"--store {uri}\n```\n"
        )
        if self.planned is not None:
            tags["jobs_planned"] = str(self.planned)
        # a short display name (the UI's name column is narrow); the full id is the sweep_id tag
        self.tracker = _tracker(config, run_name=f"{label} {time.strftime('%H:%M')}", tags=tags)
        self.tracker.check_reachable()
        self.tracker.start()
        self._hold(config)
        if params:
            # "+group=a,b" / "~key" sweep keys: MLflow param names may not contain '+' or '~'
            self.tracker.log_params({f"sweep.{k.lstrip('+~')}": v for k, v in params.items()})
        # a saved view of the runs table named after the sweep: its runs, with ω, estimator, seed, eval success
        # and the swept keys as columns (``gigpo-lab ui`` prints the URL that opens it)
        swept = tuple(k.lstrip("+~") for k in params)
        view = experiment_view(f"tags.sweep_id = '{sweep_id}'", swept)
        self.tracker.save_view(sweep_id, f"sweep {label} {time.strftime('%Y-%m-%d %H:%M')}", view)
        self._announce(config, sweep_id, overrides)

    def _hold(self, config: DictConfig) -> None:
        """The parent run is open: listed for ``fail_open_sweeps`` (with its jobs, when they run on this
        machine), and SIGTERM turned into an exception."""
        self.state.open_parents.append(self.tracker)
        if _jobs_are_local(config):
            self.state.local_parents.add(self.tracker.run_id)
        _exit_on_sigterm(self.state)

    def _announce(self, config: DictConfig, sweep_id: str, overrides: str) -> None:
        """Hand the parent run and sweep id to the jobs (the environment they inherit), and tell ``notify``."""
        os.environ[PARENT_ENV], os.environ[SWEEP_ENV] = self.tracker.run_id, sweep_id
        log.info("MLflow sweep parent run %s (sweep id %s)", self.tracker.run_id, sweep_id)
        self.state.notify(SweepStarted(sweep_id, overrides, self.tracker.uri, str(config.hydra.sweep.dir)))

    def _reopen(self, config: DictConfig, overrides: str) -> bool:
        """``resume=true``: reopen the latest unfinished parent run of a sweep with these overrides and keep its
        sweep id (``sweep_resume``); False when there is none (a fresh sweep starts)."""
        tracker = _tracker(config)
        tracker.check_reachable()
        try:
            parent = parent_to_resume(tracker.client, tracker.experiment_id(), overrides)
        except SweepStillRunning as err:  # two launchers must not run one sweep's jobs
            log.warning("resume=true: %s; starting a new sweep instead", err)
            return False
        if parent is None:
            log.warning("resume=true: no unfinished sweep with overrides %r; starting a new one", overrides)
            return False
        self.tracker = _tracker(config, run_id=parent.info.run_id)
        self.tracker.start()
        self._hold(config)
        resumed = int(parent.data.tags.get("resumed", "0")) + 1
        self.tracker.set_tags({"resumed": resumed})
        if "error" in parent.data.tags:
            self.tracker.client.delete_tag(parent.info.run_id, "error")  # set again at the end if still due
        self._announce(config, parent.data.tags["sweep_id"], overrides)
        return True

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.tracker is None or self.tracker not in self.state.open_parents:
            return
        sweep_id = os.environ.pop(SWEEP_ENV, None)
        os.environ.pop(PARENT_ENV, None)
        client = self.tracker.client
        exp = client.get_experiment_by_name(self.tracker.experiment)
        children = all_runs(client, exp.experiment_id, f"tags.mlflow.parentRunId = '{self.tracker.run_id}'")
        statuses = [r.info.status for r in latest_runs(children)]  # a job run again: its latest run
        failed = sum(s != "FINISHED" for s in statuses)
        incomplete = self._incomplete(len(statuses))
        tags = {"jobs": len(statuses), "jobs_failed": failed}
        if incomplete:
            tags["error"] = incomplete
        self.tracker.set_tags(tags)
        # decided by the one read of the signal's flag above: a SIGTERM that lands after it finds every planned
        # job run and ended, which is what FINISHED says
        self.tracker.end("FAILED" if failed or incomplete else "FINISHED")
        self.state.open_parents.remove(
            self.tracker
        )  # only now: a SIGTERM before this line still finds it open
        ended = SweepEnded(sweep_id, len(statuses), failed, self.tracker.uri, incomplete)
        self.state.ended.append(ended)
        self.state.notify(ended)

    def _incomplete(self, jobs: int) -> str | None:
        """Why a sweep whose sweeper returned is still not complete, else ``None``: SIGTERM reached the launcher
        (its exception may have been swallowed on the way up, and the jobs after it skipped), or fewer jobs
        have runs than were planned."""
        if self.state.terminated is not None:
            return f"{type(self.state.terminated).__name__}: {self.state.terminated}"
        if self.planned is not None and jobs < self.planned:
            return f"{self.planned - jobs} of {self.planned} planned jobs never ran"
        return None


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs Hydra's basic sweeper will launch for ``config`` (its ``params`` and the command's sweep
    overrides, expanded as it expands them); ``None`` for another sweeper (Optuna decides as it goes)."""
    # private module: Hydra's own sweeper lives only in hydra._internal (its _target_ in Hydra's config names it
    # there) and no public call expands a sweep; split_arguments is the very expansion it launches. hydra-core
    # is pinned to 1.3 (pyproject.toml); tests/test_private_apis.py checks the count.
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != f"{BasicSweeper.__module__}.{BasicSweeper.__name__}":
        return None
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    try:
        overrides = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
        return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))
    except Exception:  # a glob(...) sweep needs Hydra's config loader to expand: the count is not known here
        return None


def _jobs_are_local(config: DictConfig) -> bool:
    """Whether the sweep's jobs run on this machine and stop with its launcher: Hydra's basic launcher (in
    process) or the joblib launcher (worker processes), not a cluster's (submitit: SLURM jobs go on)."""
    target = str(config.hydra.launcher.get("_target_", ""))
    return "joblib" in target or target.endswith("BasicLauncher")


def _end_orphaned_jobs(tracker, err: BaseException) -> None:
    """The job runs under ``tracker``'s parent still RUNNING, ended KILLED with the reason: their worker
    processes stopped with the launcher and cannot end them (joblib's workers are terminated with it)."""
    client = tracker.client
    children = client.search_runs(
        [tracker.experiment_id()],
        filter_string=f"tags.mlflow.parentRunId = '{tracker.run_id}' and attributes.status = 'RUNNING'",
    )
    for run in children:
        client.set_tag(
            run.info.run_id, "error", f"the sweep's launcher stopped while this job ran ({err})"[:5000]
        )
        client.set_terminated(run.info.run_id, status="KILLED")


def _exit_on_sigterm(state: SweepState) -> None:
    """In the launcher, SIGTERM becomes an exception (exit code 143), so that the command ends the open parent
    run FAILED with the reason; Python's default would end the process with no cleanup and leave the parent
    RUNNING. Only when nothing else handles SIGTERM (Lightning installs its own in a run)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, state.raise_terminated)


def fail_open_sweeps(state: SweepState, err: BaseException) -> None:
    """End every parent run still open in ``state`` FAILED, with the reason in its ``error`` tag: the launcher
    died before the jobs ran (e.g. ``hydra/launcher=slurm`` where there is no ``sbatch``), so Hydra never
    calls ``on_multirun_end``, or SIGTERM stopped it. A job run still RUNNING under a parent whose jobs run on
    this machine is ended KILLED (its worker stopped with the launcher). No run is ever left RUNNING.

    A parent run that cannot be ended now (its store is locked or gone) stays in ``state.open_parents``, so
    that a later call can still end it."""
    release_unwound_frames(err)  # a store read that a signal cut short would hold the store's lock
    for env in (PARENT_ENV, SWEEP_ENV):
        os.environ.pop(env, None)
    for tracker in list(state.open_parents):
        try:
            if tracker.run_id in state.local_parents:
                _end_orphaned_jobs(tracker, err)
            tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
            tracker.end("FAILED")
        except Exception:  # the store is locked or went away: the run stays open for a later call
            log.exception("could not mark the sweep parent run %s FAILED", tracker.run_id)
        else:
            state.open_parents.remove(tracker)
