"""A multi-process job whose rank dies ends its MLflow run FAILED, naming the rank and the reason.

Only global rank 0 writes the run (``gigpo_lab.training.distributed``), but rank 0 cannot be relied on to
end it when another rank dies. Under ``lightning=ddp`` and ``lightning=fsdp`` Lightning starts ranks 1.. as
children of rank 0 (``_SubprocessScriptLauncher``) and watches them from a thread of rank 0
(``_ChildProcessObserver``, every 5 s): as soon as a child has exited with a non-zero status it sends SIGKILL
to every rank, rank 0 included. Rank 0 ends the run in its own exception path, which it reaches only if
a collective with the dead rank fails first (gloo: "Connection closed by peer"); when it is busy elsewhere
(a rollout, an evaluation: no collective for longer than the observer's 5 s) it is killed first, and the
run stayed RUNNING for ever. Where rank 0 did get there, the run said only "Connection closed by peer".

So every rank, and rank 0's watcher, can end the run (:class:`RankFailures`, a callback of every rank):

* when training starts, rank 0 broadcasts the run (store and id), and every rank shares its host and pid;
* a rank that raises writes, in Lightning's ``on_exception`` (before any collective of the exception path,
  which would wait for the other ranks), the tags ``failed_rank`` and ``error`` (``rank 1: EnvFailure: ...``)
  and the status FAILED, itself;
* on rank 0 (on each node's local rank 0), Lightning's observer's ``_terminate_all`` is wrapped: before it
  sends its SIGKILLs, it writes the dead child's rank and how it ended (``rank 1 (pid 4242) was killed by
  SIGKILL``);
* a rank whose error follows the death of another names the dead one: a child of its launcher that exited
  non-zero, or a rank of its host whose process is gone (rank 0, under Lightning's launch the parent of the
  node's other ranks, is seen through their being reparented; a rank started by srun or torchrun through
  its pid): ``rank 0 (pid 4242) ended without recording why (killed?); rank 1 then failed: RuntimeError:
  [...] Connection closed by peer``.

The first record wins (:func:`record_failure`): the first failure is the cause, and the errors of the ranks
that follow it (a broken collective) are its consequences. A rank killed outright writes nothing itself; its
death is written by its node's rank 0 (its watcher) or by a surviving rank of its host. A rank of another
host killed outright is seen only through the broken collective of a surviving rank, which then names
itself. A single-process run is left to ``train``'s own exception path (its ``error`` tag, no
``failed_rank``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import lightning as L

from gigpo_lab.tracking.unwound import release_unwound_frames

log = logging.getLogger(__name__)

#: The run tags written on a failure: the rank that failed first, and why.
FAILED_RANK_TAG, ERROR_TAG = "failed_rank", "error"


def record_failure(uri: str, run_id: str, rank: int, reason: str) -> bool:
    """End the run FAILED with ``failed_rank=rank`` and ``error=reason``, unless a failure is already recorded
    there (the first one wins) or the run has already ended; True when the run now holds a failure."""
    from mlflow.entities import RunTag

    from gigpo_lab.tracking.mlflow_tracker import CHECK_RETRIES, CHECK_TIMEOUT_S, MlflowTracker, http_limits

    tracker = MlflowTracker(uri, "", run_id=run_id)
    try:
        with http_limits(uri, CHECK_RETRIES, CHECK_TIMEOUT_S, override=True):
            run = tracker.client.get_run(run_id)
            if FAILED_RANK_TAG in run.data.tags:
                return True
            if run.info.status != "RUNNING":
                return False
            tags = [RunTag(FAILED_RANK_TAG, str(rank)), RunTag(ERROR_TAG, reason[:5000])]
            tracker.client.log_batch(run_id, tags=tags)
            tracker.client.set_terminated(run_id, status="FAILED")
        return True
    except Exception as err:  # the store is away: rank 0's own path (buffered) may still end the run
        log.warning(
            "could not record the failure of rank %s in run %s (%s: %s)",
            rank,
            run_id,
            type(err).__name__,
            err,
        )
        return False


def error_text(err: BaseException) -> str:
    """``<Type>: <message>`` on one line."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def how_it_ended(returncode: int) -> str:
    """``was killed by SIGKILL`` or ``exited with status 1``."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def dead_child(procs, first_rank: int) -> tuple[int, str] | None:
    """(global rank, how it ended) of the first of Lightning's child ranks ``procs`` (``subprocess.Popen``;
    the i-th is rank ``first_rank + i``) that has exited with a non-zero status, or None."""
    for i, proc in enumerate(procs):
        code = proc.poll()
        if code:
            return first_rank + i, f"rank {first_rank + i} (pid {proc.pid}) {how_it_ended(code)}"
    return None


def _host() -> str:
    return socket.gethostname()


def _gone(pid: int) -> bool:
    """Whether the process ``pid`` of this host has ended (no such process, or a zombie not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (OSError, IndexError):  # no /proc (not Linux): a process that answers is alive
        return False


def _gather(item: Any, world: int) -> list[Any]:
    """Every rank's ``item``, by global rank (a collective)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return [item]
    items: list[Any] = [None] * world
    dist.all_gather_object(items, item)
    return items


class RankFailures(L.Callback):
    """Record which rank failed a multi-process run, and why, in its MLflow run (module doc).

    Args:
        logger: the job's ``IterationLogger``, whose ``tracker`` (on global rank 0) is the open run; it must
            come before this callback, so that the run is open when this one's ``on_fit_start`` runs.
    """

    def __init__(self, logger) -> None:
        self.logger = logger
        self.run: dict[str, Any] | None = None  # {"uri", "run_id"}, once rank 0 has opened it
        self.peers: list[tuple[str, int]] = []  # (host, pid) of every rank, by global rank
        #: True once this rank has seen a failure recorded in the run (its own or an earlier one).
        self.recorded = False
        self._parent = os.getppid()  # under Lightning's launch, rank 0 for the other ranks of its node

    def on_fit_start(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.world_size <= 1:
            return
        run = None
        writer = self.logger.tracker if trainer.is_global_zero else None
        if writer is not None:
            run = {"uri": getattr(writer, "tracker", writer).uri, "run_id": writer.run_id}
        self.run = trainer.strategy.broadcast(run, src=0)  # collectives: every rank is here
        self.peers = _gather((_host(), os.getpid()), trainer.world_size)
        if self.run is not None:
            self._watch_children(trainer)  # on a node's local rank 0, whose children Lightning started

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        if self.run is None:
            return
        # Lightning calls this before ``fit`` returns (``train._fit`` releases later): a signal's exception that
        # cut a store read short would lock out the write below
        release_unwound_frames(exception)
        me = trainer.global_rank
        rank, reason = me, f"rank {me}: {error_text(exception)}"
        cause = self._dead_peer(trainer)
        if cause is not None:
            rank, reason = cause[0], f"{cause[1]}; rank {me} then failed: {error_text(exception)}"
        self.recorded = record_failure(self.run["uri"], self.run["run_id"], rank, reason)

    def _dead_peer(self, trainer: L.Trainer) -> tuple[int, str] | None:
        """(rank, what happened) of a rank that died before this one failed: a child of this process's
        launcher that exited non-zero, or a rank of this host whose process is gone (rank 0 under Lightning's
        launch: this rank's parent, now reparented); None if none is seen (another host's rank, say)."""
        found = self._children(trainer)
        child = dead_child(*found) if found else None
        if child is not None:
            return child
        for rank, (host, pid) in enumerate(self.peers):
            orphaned = pid == self._parent and os.getppid() != pid
            if rank != trainer.global_rank and host == _host() and (orphaned or _gone(pid)):
                return rank, f"rank {rank} (pid {pid}) ended without recording why (killed?)"
        return None

    @staticmethod
    def _children(trainer: L.Trainer):
        """(Lightning's child processes of this rank, the global rank of the first), or None."""
        # the undocumented list of _SubprocessScriptLauncher, the one its observer watches (lightning pinned to
        # 2.6 in pyproject.toml; tests/test_private_apis.py)
        procs = getattr(trainer.strategy.launcher, "procs", None)
        if not procs:
            return None
        return procs, trainer.global_rank + 1

    def _watch_children(self, trainer: L.Trainer) -> None:
        """Write a dead child's rank before Lightning's observer thread kills every rank (module doc)."""
        from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

        found = self._children(trainer)
        if found is None:
            return
        # private: Lightning gives no hook before its observer kills every rank, so its _terminate_all is wrapped
        # on the instance, found by the list it watches (_child_processes); tests/test_private_apis.py checks
        # that _run still calls the instance's _terminate_all when a child exits non-zero
        for thread in threading.enumerate():
            if isinstance(thread, _ChildProcessObserver) and thread._child_processes is found[0]:
                kill_all = thread._terminate_all

                def record_then_kill(kill_all=kill_all) -> None:
                    try:
                        child = dead_child(*found)
                        if child is not None:
                            record_failure(self.run["uri"], self.run["run_id"], *child)
                    finally:
                        kill_all()

                thread._terminate_all = record_then_kill


def failure_recorded(trainer: L.Trainer) -> bool:
    """Whether this rank's :class:`RankFailures` saw the run's failure recorded (``train``'s exception path then
    leaves the ``error`` tag alone)."""
    return any(isinstance(cb, RankFailures) and cb.recorded for cb in trainer.callbacks)
