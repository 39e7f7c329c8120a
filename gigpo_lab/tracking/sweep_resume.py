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


def parent_to_resume(client, experiment_id: str, sweep_overrides: str):
    """The latest sweep parent run of the experiment with these overrides that did not end FINISHED, or
    None (then the sweep starts afresh)."""
    from gigpo_lab.tracking.sweep import ROLE_TAG

    quoted = sweep_overrides.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{ROLE_TAG}` = 'sweep-parent' and tags.sweep_overrides = '{quoted}'",
        order_by=["attributes.start_time DESC"],
    )
    return next((r for r in runs if r.info.status != "FINISHED"), None)


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
    quoted = key.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and tags.{JOB_KEY_TAG} = '{quoted}'",
    )
    return latest_runs(runs)
