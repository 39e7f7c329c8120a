"""``resume=true``: a multirun launched again with the same overrides goes on where it stopped.

The sweep's parent run is found again by its overrides (``sweep_overrides``, the ``resume`` key left out) in
the same experiment: the latest such parent that did not end FINISHED is reopened, and the sweep keeps its
``sweep_id``. Each job is known by its own overrides (the ``sweep_job_key`` tag of its run). A job whose run
under that parent FINISHED is skipped; any other job runs again from the start, and its earlier runs that did
not finish are tagged ``superseded_by`` (kept, never deleted): the sweep's outcome and ``gigpo-lab compare``
read the jobs' latest runs only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

#: The run-level key that asks for a resume; left out of every key below.
RESUME_KEY = "resume"
#: A job's identity within its sweep: its overrides, sorted.
JOB_KEY_TAG = "sweep_job_key"
#: On an earlier run of a job that ran again: the run id that replaced it.
SUPERSEDED_TAG = "superseded_by"


#: Keys that do not make a job another job: what a run keeps on disk and where it reports, not what it computes.
NOT_IDENTITY = (
    "trainer.keep_checkpoints",
    "trainer.checkpoint_frozen_base",
    "tracking.log_checkpoint",
    "tracking.row_file",
)
#: Prefixes of such keys (a run's extra tags).
NOT_IDENTITY_PREFIX = "tracking.tags."


def without_resume(overrides: Iterable[str]) -> list[str]:
    """The overrides less any ``resume=…`` (``+resume``, ``++resume`` too) and the keys that are no part of a
    job's identity (``NOT_IDENTITY``, the run's extra tags)."""
    out = []
    for o in overrides:
        name = o.lstrip("+~").split("=", 1)[0]
        if name != RESUME_KEY and name not in NOT_IDENTITY and not name.startswith(NOT_IDENTITY_PREFIX):
            out.append(o)
    return out


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


def job_key_tag() -> dict[str, str]:
    """``{sweep_job_key: <this job's key>}`` in a Hydra multirun job, else ``{}``."""
    from hydra.core.hydra_config import HydraConfig

    from gigpo_lab.config_paths import in_multirun

    return {JOB_KEY_TAG: job_key(HydraConfig.get().overrides.task)} if in_multirun() else {}


def parent_to_resume(client, experiment_id: str, sweep_overrides: str):
    """The latest sweep parent run of the experiment with these overrides, when it did not end FINISHED;
    None when there is none or the latest FINISHED (then the sweep starts afresh). The overrides are compared
    here, not in the filter, so any quote in them matches. Raises ``SweepStillRunning`` when that parent is
    RUNNING and its launcher (the pid that ends its ``sweep_id``) is alive on this machine (the callback then
    starts a new sweep, with a warning)."""
    from gigpo_lab.tracking.sweep_env import ROLE_TAG

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


class ResumedJob:
    """A job of a sweep relaunched with ``resume=true``: its FINISHED run under the sweep's parent, if it has one
    (the job is then skipped), and the earlier runs it supersedes. Store errors never stop the sweep: the job
    runs, or its earlier runs stay untagged, and a later resume sorts it out."""

    def __init__(self, cfg, parent_id: str) -> None:
        from gigpo_lab.tracking import MlflowTracker, default_tracking_uri

        self.tracker = MlflowTracker(cfg.tracking.uri or default_tracking_uri(), cfg.tracking.experiment)
        self.experiment_id, self.parent_id = self.tracker.experiment_id(), parent_id
        self.key = job_key_tag()[JOB_KEY_TAG]
        self.finished = finished_run_of_job(self.tracker.client, self.experiment_id, parent_id, self.key)

    @classmethod
    def of(cls, cfg) -> ResumedJob | None:
        """The job's resume record when ``resume=true`` in a tracked multirun, else None (also when the store
        cannot be read now)."""
        from gigpo_lab.config_paths import in_multirun
        from gigpo_lab.tracking.sweep_env import sweep_context

        parent_id, _ = sweep_context()
        if not (cfg.get("resume") and in_multirun() and parent_id):
            return None
        try:
            return cls(cfg, parent_id)
        except Exception:
            log.warning(
                "resume=true: this job's earlier runs could not be read; it runs again", exc_info=True
            )
            return None

    def metrics(self) -> dict[str, float]:
        """The finished run's last metric values."""
        return dict(self.finished.data.metrics)

    def supersede(self, run_id: str) -> None:
        """Tag the job's earlier runs under the parent as replaced by ``run_id``."""
        try:
            supersede(self.tracker.client, self.experiment_id, self.parent_id, self.key, run_id)
        except Exception:
            log.warning(
                "resume=true: the earlier runs of this job could not be tagged superseded", exc_info=True
            )
