"""``resume=true``: a multirun launched again with the same overrides goes on where it stopped.

The sweep's parent run is found again by its overrides (``sweep_overrides``, the ``resume`` key left out) in
the same experiment: the latest such parent that did not end FINISHED is reopened, and the sweep keeps its
``sweep_id``. Each job is known by its own overrides (the ``sweep_job_key`` tag of its run). A job whose run
under that parent FINISHED is skipped; any other job runs again from the start, and its earlier runs that did
not finish are tagged ``superseded_by`` (kept, never deleted): the sweep's outcome and ``gigpo-lab compare``
read the jobs' latest runs only.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The run-level key that asks for a resume; left out of every key below.
RESUME_KEY = "resume"
#: A job's identity within its sweep: its overrides, sorted.
JOB_KEY_TAG = "sweep_job_key"
#: On an earlier run of a job that ran again: the run id that replaced it.
SUPERSEDED_TAG = "superseded_by"


def without_resume(overrides: Iterable[str]) -> list[str]:
    """The overrides less any ``resume=…`` (``+resume``, ``++resume`` too)."""
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != RESUME_KEY]


def job_key(overrides: Iterable[str]) -> str:
    """A job's identity: its overrides without ``resume``, sorted and joined by spaces."""
    return " ".join(sorted(without_resume(overrides)))


def all_runs(client, experiment_id: str, filter_string: str) -> list:
    """Every run of the experiment that matches, page by page (``search_runs`` returns 1,000 at most)."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string, max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


class SweepStillRunning(RuntimeError):
    """``resume=true`` found the sweep's parent RUNNING under a launcher that is alive."""


def parent_to_resume(client, experiment_id: str, sweep_overrides: str):
    """The latest sweep parent run of the experiment with these overrides, when it did not end FINISHED;
    None when there is none or the latest FINISHED (then the sweep starts afresh). The overrides are compared
    here, not in the filter, so any quote in them matches. Raises ``SweepStillRunning`` when that parent is
    RUNNING and its launcher (the pid that ends its ``sweep_id``) is alive on this machine (the callback then
    starts a new sweep, with a warning)."""
    from gigpo_lab.tracking.sweep import ROLE_TAG

    parents = all_runs(client, experiment_id, f"tags.`{ROLE_TAG}` = 'sweep-parent'")
    same = [r for r in parents if r.data.tags.get("sweep_overrides") == sweep_overrides]
    if not same:
        return None
    latest = max(same, key=lambda r: r.info.start_time or 0)
    if latest.info.status == "FINISHED":
        return None
    if latest.info.status == "RUNNING" and _alive(latest.data.tags.get("sweep_id", "")):
        raise SweepStillRunning(
            f"sweep {latest.data.tags['sweep_id']} is still running (its launcher's process is alive); stop it "
            "first, or leave out resume=true to start another sweep"
        )
    return latest


def _alive(sweep_id: str) -> bool:
    """Whether the process whose pid ends ``sweep_id`` (``<label>-<date>-<time>-<pid>``) runs on this machine."""
    import os

    pid = sweep_id.rsplit("-", 1)[-1]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def latest_runs(children: list) -> list:
    """The runs that stand for the sweep's jobs: those not superseded by a later run of their job."""
    return [r for r in children if SUPERSEDED_TAG not in r.data.tags]


def finished_run_of_job(client, experiment_id: str, parent_id: str, key: str):
    """The FINISHED run of job ``key`` under the parent, or None; its other runs are the caller's to
    supersede (``supersede``)."""
    runs = _job_runs(client, experiment_id, parent_id, key)
    return next((r for r in runs if r.info.status == "FINISHED"), None)


def supersede(client, experiment_id: str, parent_id: str, key: str, new_run_id: str) -> int:
    """Tag every earlier run of job ``key`` under the parent ``superseded_by=new_run_id``; return how many."""
    runs = [r for r in _job_runs(client, experiment_id, parent_id, key) if r.info.run_id != new_run_id]
    for run in runs:
        client.set_tag(run.info.run_id, SUPERSEDED_TAG, new_run_id)
    return len(runs)


def _job_runs(client, experiment_id: str, parent_id: str, key: str) -> list:
    """The parent's runs of job ``key`` not superseded yet (the key compared here: any quote in it matches)."""
    runs = all_runs(client, experiment_id, f"tags.mlflow.parentRunId = '{parent_id}'")
    return latest_runs([r for r in runs if r.data.tags.get(JOB_KEY_TAG) == key])
