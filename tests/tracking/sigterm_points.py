"""Run ``gigpo-lab train`` in this process with SIGTERM delivered at one named point of a sweep's sequence.

    python tests/tracking/sigterm_points.py POINT [overrides…]

The signal is sent by the process to itself (``os.kill``, which runs the Python handler before it returns), so
it lands exactly at POINT. A ``…-swallowed`` point sends it from inside a finalizer (``__del__``): Python
prints "Exception ignored in …" and carries on, as it does for any exception raised in a ``__del__`` or a
weakref callback (SQLAlchemy's connection-pool finalizers run in the middle of the store's writes). That is
how a SIGTERM's exception can vanish on its way up, which the sweep must survive.

Points, in the order a sweep of two jobs runs them:

* ``fit``: during the first job's ``Trainer.fit``, after its first iteration (Lightning's handler composed with
  the lab's; the exception propagates).
* ``fit-swallowed``: the same, swallowed (Lightning's own flag then stops the fit at its next check).
* ``job-end-swallowed``: after the first job has ended its run FINISHED, before the launcher starts the next.
* ``multirun-end-swallowed``: after the last job, as the sweep callback starts to close the parent run.
"""

from __future__ import annotations

import functools
import os
import signal
import sys


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class _Finalizer:
    def __del__(self) -> None:
        _sigterm()


def _swallowed_sigterm() -> None:
    """SIGTERM from inside a finalizer: the handler's exception is printed as ignored, and this returns."""
    _Finalizer()


def _once(deliver):
    """Call ``deliver`` the first time the returned hook runs, never again."""
    done = []

    def hook() -> None:
        if not done:
            done.append(True)
            deliver()

    return hook


def _after(owner, name: str, hook) -> None:
    """Run ``hook()`` after each call of ``owner.name``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        hook()
        return result

    setattr(owner, name, wrapped)


def _before(owner, name: str, hook) -> None:
    """Run ``hook()`` before each call of ``owner.name``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        hook()
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)


def install(point: str) -> None:
    """Arrange for SIGTERM to land at ``point`` (module docstring)."""
    from gigpo_lab.cli.train import Job
    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.tracking.sweep import MlflowSweepCallback

    points = {
        "fit": (IterationLogger, "on_train_epoch_end", _after, _sigterm),
        "fit-swallowed": (IterationLogger, "on_train_epoch_end", _after, _swallowed_sigterm),
        "job-end-swallowed": (Job, "__call__", _after, _swallowed_sigterm),
        "multirun-end-swallowed": (MlflowSweepCallback, "on_multirun_end", _before, _swallowed_sigterm),
    }
    owner, name, where, deliver = points[point]
    where(owner, name, _once(deliver))


if __name__ == "__main__":
    from gigpo_lab.cli.train import main

    install(sys.argv[1])
    sys.argv = ["gigpo-lab", *sys.argv[2:]]
    main()
