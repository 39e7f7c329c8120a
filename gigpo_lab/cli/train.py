"""``gigpo-lab train [overrides…]`` (and ``python -m gigpo_lab.cli train``): Hydra's command line over
``gigpo_lab.train.train``, ``-m`` for a multirun.

What a person sees: a header, one progress line and a summary for a run (``ConsoleReporter``, handed to
``train``); a header, one line per finished job and a summary for a sweep; a config mistake as one or two
lines naming the key (exit 2, before anything is written); any other failure as one line (exit 1);
``verbose=true`` or the user's own ``HYDRA_FULL_ERROR=1`` for the traceback. A sweep whose launcher dies (a
missing ``sbatch``, SIGTERM) ends its MLflow parent run FAILED with the reason.

``main`` makes the one ``SweepState`` of the call and hands it to the sweep callback Hydra builds
(``sweep_scope``); once Hydra returns it reads what happened there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig

from gigpo_lab.cli.console import (
    configure_output,
    print_header,
    print_job_line,
    print_summary,
    print_sweep_header,
    print_sweep_summary,
)
from gigpo_lab.config_paths import in_multirun
from gigpo_lab.tracking.sweep import SweepEnded, SweepStarted, SweepState, fail_open_sweeps, sweep_scope
from gigpo_lab.tracking.sweep_resume import ResumedJob
from gigpo_lab.tracking.unwound import release_unwound_frames
from gigpo_lab.train import Reporter
from gigpo_lab.training.distributed import is_launch_rank_zero

log = logging.getLogger(__name__)

#: Hydra's own logging configs instead of the lab's quiet ones: every INFO line on the console.
VERBOSE_LOGGING = ("hydra/hydra_logging=default", "hydra/job_logging=default")
#: Set beside HYDRA_FULL_ERROR=1 when ``main`` set that, not the user (``_hydra_reraises``).
_OWN_FULL_ERROR = "GIGPO_LAB_OWN_FULL_ERROR"


class ConsoleReporter(Reporter):
    """What ``train`` shows on the console: the header, the progress line and the summary of a run alone (a
    sweep prints one line per job instead: its parallel jobs would interleave their lines)."""

    def __init__(self) -> None:
        self.run_id: str | None = None

    def header(self, cfg: DictConfig, store: str, out: Path, model: str) -> None:
        if not in_multirun():
            print_header(cfg, store, out, model)

    def progress(self, source, iterations: int) -> list:
        if in_multirun():
            return []
        from gigpo_lab.cli.progress import ProgressLine

        return [ProgressLine(source, iterations)]

    def run_opened(self, run_id: str) -> None:
        self.run_id = run_id

    def summary(self, metrics: dict[str, float], uri: str, run_id: str, ckpt_dir: Path) -> None:
        if not in_multirun():
            print_summary(metrics, uri, run_id, ckpt_dir)


class Job:
    """The task function Hydra calls for each job. In a multirun a failing job is logged (its MLflow run says
    FAILED) and the sweep goes on; the command exits non-zero after the last job. A single run's error is kept
    in ``error`` for ``main`` to report (Hydra would print its own banner first).

    ``launch_argv`` is the command line this process was started with (``gigpo-lab train …`` keeps its
    ``train``). Hydra parses its own ``sys.argv`` (the overrides alone, ``_hydra_argv``); the job puts the launch
    command back, because Lightning starts DDP's other ranks by running ``sys.argv`` again, and every rank must
    enter through the same command. A copy of the job in another process (a joblib or submitit worker) keeps
    that process's own command line."""

    def __init__(self, launch_argv: list[str] | None, state: SweepState | None = None) -> None:
        self.launch_argv = launch_argv
        self.error: Exception | None = None
        #: the launcher's sweep state: a job does not start once SIGTERM has reached the launcher
        self.state = state

    def __getstate__(self) -> dict:
        return {"launch_argv": None, "error": None, "state": None}

    def __call__(self, cfg: DictConfig) -> float | None:
        from hydra.core.hydra_config import HydraConfig

        from gigpo_lab.train import record_failed_job, train

        if self.state is not None:
            self.state.stop_if_terminated()
        if self.launch_argv is not None:
            sys.argv = list(self.launch_argv)
        verbose = bool(cfg.get("verbose", False))
        configure_output(verbose)  # again here: joblib's workers are fresh processes
        resumed = ResumedJob.of(cfg)
        if resumed is not None and resumed.finished is not None:
            metrics = resumed.metrics()
            if is_launch_rank_zero():
                print_job_line(cfg, HydraConfig.get().job.num, metrics, note="finished earlier: skipped")
            return metrics.get("eval/success_rate")
        reporter = ConsoleReporter()
        try:
            metrics = train(cfg, reporter)
        except Exception as err:
            if not in_multirun():
                self.error = err
                return None
            if reporter.run_id is None and is_launch_rank_zero():
                # the sweep's summary counts it, ``compare`` lists it (and a resumed sweep supersedes with it)
                reporter.run_id = record_failed_job(cfg, err)
            if verbose:
                log.exception("job %s failed", HydraConfig.get().job.num)
            print_job_line(cfg, HydraConfig.get().job.num, None, err)
            return None
        except BaseException as err:  # a signal's: a store read it cut short would lock out the write below
            release_unwound_frames(err)
            raise
        finally:
            if resumed is not None and reporter.run_id is not None and is_launch_rank_zero():
                resumed.supersede(reporter.run_id)  # a store error there is logged: the job's outcome stands
        if in_multirun() and is_launch_rank_zero():
            print_job_line(cfg, HydraConfig.get().job.num, metrics)
        return metrics.get("eval/success_rate")


def print_sweep_event(event: SweepStarted | SweepEnded) -> None:
    """A sweep's header when it starts, its summary when it ends (``SweepState.notify``)."""
    if isinstance(event, SweepStarted):
        print_sweep_header(event.sweep_id, event.overrides, event.uri, event.folder)
    else:
        print_sweep_summary(event.sweep_id, event.jobs, event.failed, event.uri, event.incomplete)


def _verbose(args: list[str]) -> bool:
    """``verbose=true`` among the overrides (read before Hydra composes: it chooses Hydra's logging)."""
    return any(re.fullmatch(r"\+*verbose=(true|True|1|yes)", a) for a in args)


def _wants_traceback(args: list[str]) -> bool:
    """``verbose=true``, or the user's own ``HYDRA_FULL_ERROR=1``."""
    user_full = os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(_OWN_FULL_ERROR) != "1"
    return _verbose(args) or user_full


@contextlib.contextmanager
def _hydra_argv(args: list[str]) -> Iterator[None]:
    """``sys.argv`` as Hydra reads it (``hydra.main`` parses nothing else): the program and the overrides, with
    no sub-command. The launch command is put back afterwards (and by ``Job`` meanwhile)."""
    launch = sys.argv
    sys.argv = [launch[0], *args]
    try:
        yield
    finally:
        sys.argv = launch


@contextlib.contextmanager
def _hydra_reraises() -> Iterator[None]:
    """``HYDRA_FULL_ERROR=1`` while Hydra runs, so that it re-raises an error instead of printing its own
    report, and ``main`` prints one line. Hydra reads nothing but this process variable. The processes started
    from this one (DDP's other ranks, joblib workers) inherit it, so ``_OWN_FULL_ERROR`` beside it says that the
    lab set it, not the user: they still report errors in one line. Both are put back afterwards."""
    saved = {k: os.environ.get(k) for k in ("HYDRA_FULL_ERROR", _OWN_FULL_ERROR)}
    if os.environ.get("HYDRA_FULL_ERROR") != "1":
        os.environ.update({"HYDRA_FULL_ERROR": "1", _OWN_FULL_ERROR: "1"})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> None:
    """``gigpo-lab train [overrides…]``: train one agent, or a sweep with ``-m``.

    A config mistake prints one or two lines that name the key and exits 2 before anything is written; any
    other failure prints one line and exits 1 (``verbose=true`` or ``HYDRA_FULL_ERROR=1``: the traceback).
    A sweep whose launcher dies ends its MLflow parent run FAILED with the reason; a sweep with failed jobs
    exits 1 once every other job has finished.
    """
    import hydra

    from gigpo_lab.cli.errors import explain
    from gigpo_lab.cli.help import page, register_help_resolver
    from gigpo_lab.config_paths import conf_dir, register_schemas

    args = sys.argv[1:] if argv is None else list(argv)
    text = page() if {"-h", "--help"} & set(args) else None
    if text is not None:  # the lab's help page, as Hydra would print it, without composing (cli/help.py)
        sys.stdout.write(text + "\n")
        return
    register_schemas()
    register_help_resolver()
    verbose = _verbose(args)
    traceback_wanted = _wants_traceback(args)
    configure_output(verbose)
    state = SweepState(notify=print_sweep_event)
    job = Job(list(sys.argv), state)
    task = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(job)
    try:
        with (
            _hydra_argv([*args, *(VERBOSE_LOGGING if verbose else ())]),
            _hydra_reraises(),
            sweep_scope(state),
        ):
            task()
        if job.error is not None:
            raise job.error
        state.stop_if_terminated()
    except BaseException as caught:
        # a SIGTERM that reached the launcher is the reason, whatever it became on the way up (Lightning's
        # SIGTERMException exits 0; a swallowed one let the sweep return)
        err = state.terminated or caught
        if caught is not err:
            release_unwound_frames(caught)  # ``fail_open_sweeps`` releases ``err``'s chain
        fail_open_sweeps(state, err)
        if err is not caught:
            raise err from caught
        if traceback_wanted or isinstance(err, SystemExit | KeyboardInterrupt):
            raise
        code, message = explain(err)
        sys.stderr.write(message + "\n")
        sys.exit(code)
    failures = state.failures()
    if failures:
        sys.stderr.write("\n".join(failures) + "\n")
        sys.exit(1)
