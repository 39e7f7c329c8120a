"""How a sweep's jobs know their sweep: the environment variables the sweep callback sets for its jobs, and the
tag that marks a sweep's parent run. ``sweep.py`` (which sets them) and ``sweep_resume.py`` (which reads them)
both import this module, so neither imports the other in a loop."""

from __future__ import annotations

import os

#: The parent run's id, set for every job of a tracked sweep.
PARENT_ENV = "GIGPO_LAB_PARENT_RUN_ID"
#: The sweep's id (``multirun-<date>-<time>-<pid>``), set for every job of a tracked sweep.
SWEEP_ENV = "GIGPO_LAB_SWEEP_ID"
#: The tag whose value ``sweep-parent`` marks a sweep's parent run.
ROLE_TAG = "gigpo_lab.role"


def sweep_context() -> tuple[str | None, str | None]:
    """``(parent_run_id, sweep_id)`` when this process is a job of a tracked sweep, else ``(None, None)``."""
    return os.environ.get(PARENT_ENV), os.environ.get(SWEEP_ENV)
