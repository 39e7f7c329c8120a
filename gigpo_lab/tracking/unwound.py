"""Let go of what a signal's exception left half done in the store, before the runs are ended.

A signal's exception (SIGTERM's ``Terminated``, Lightning's ``SIGTERMException``, Ctrl-C's
``KeyboardInterrupt``) is raised between any two bytecodes. When it lands inside an MLflow call on a sqlite
store, MLflow's own cleanup (``except Exception: session.rollback()``) does not see it, and the call's open
statement stays referenced from the frames the exception unwound through. A read cut short that way (CI met
one inside ``_get_run``) holds the store's shared lock for as long as the exception's traceback lives, which is
while the caller handles it. Every write then waits out MLflow's 20-second busy timeout and fails, and the run
that should say FAILED stays RUNNING. ``release_unwound_frames`` clears those frames' locals and collects, so
that the statement and its connection are finalised and the lock goes with them.
"""

from __future__ import annotations

import gc
import traceback


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and every exception it was raised from (``__cause__``) or while handling (``__context__``),
    each once."""
    found: list[BaseException] = []
    todo = [err]
    while todo:
        e = todo.pop()
        if e is None or any(e is f for f in found):
            continue
        found.append(e)
        todo += [e.__cause__, e.__context__]
    return found


def release_unwound_frames(err: BaseException) -> None:
    """Clear the local variables of the finished frames in the tracebacks of ``err``'s chain, then collect, when
    a signal's exception is in the chain (one that is no ``Exception``: it can land anywhere). The tracebacks
    still print in full; only the locals a post-mortem debugger would show go. An ordinary error is raised
    where its code chose, past the libraries' own cleanup, and keeps its frames for that debugger."""
    chain = _chain(err)
    if all(isinstance(e, Exception) for e in chain):
        return
    for e in chain:
        # a frame still executing (the caller's) is skipped; that of a generator which caught the exception and
        # yielded again would be closed (``frame.clear``, Python 3.11): the lab has none, and it is a rare shape
        traceback.clear_frames(e.__traceback__)
    gc.collect()
