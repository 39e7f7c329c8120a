"""The finished runs of a study's MLflow experiment, one row per run, labelled by setting and arm.

A study job's overrides (its ``sweep_job_key`` tag, ``gigpo_lab.tracking.sweep_resume.job_key``) name its
arm and its setting as config groups of experiments/, for example::

    +experiments/arm=gigpo_placebo +experiments/study_env=frozenlake8x8 experiments=pilot seed=103 ...

- ``arm``: the ``+experiments/arm=`` choice, followed by any other override that is not the seed, the store, a
  setting or the study itself (``estimator.step_advantage_weight=0.5`` in the ω study);
- ``setting``: the other ``+experiments/<group>=`` choices (``frozenlake8x8``).

Every FINISHED child run of every sweep of the experiment counts, except runs a resumed sweep superseded;
two FINISHED runs of one (setting, arm, seed) keep the newer and say so.
"""

from __future__ import annotations

METRICS = {  # row key -> MLflow metric (its last value)
    "eval_final": "eval/final",
    "eval_auc": "eval/auc",
    "greedy_success": "eval/greedy_success_rate",
    "env_steps": "rollout/env_steps_total",
}
#: Overrides that are not part of an arm's identity.
NOT_ARM = ("seed=", "tracking.", "experiments=", "resume=", "hydra.")


def parse_job_key(key: str) -> tuple[str, str, int]:
    """``(setting, arm, seed)`` of a job from its ``sweep_job_key``."""
    arm, extra, settings, seed = "", [], [], None
    for token in key.split():
        name, _, value = token.partition("=")
        if name == "+experiments/arm":
            arm = value
        elif name.startswith("+experiments/"):
            settings.append(value)
        elif name == "seed":
            seed = int(value)
        elif not token.startswith(NOT_ARM):
            extra.append(token)
    if seed is None:
        raise ValueError(f"job key {key!r} has no seed= override")
    return " ".join(settings) or "default", " ".join([arm or "default", *extra]), seed


def read_runs(uri: str, experiment: str) -> tuple[list[dict], list[str]]:
    """The rows of the experiment's finished runs, sorted by (setting, arm, seed), and notes on duplicates."""
    from mlflow.tracking import MlflowClient

    from gigpo_lab.tracking.sweep_resume import SUPERSEDED_TAG, all_runs

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = ", ".join(e.name for e in client.search_experiments())
        raise SystemExit(f"no experiment {experiment!r} in {uri}; it has: {names}")
    runs = all_runs(client, found.experiment_id, "attributes.status = 'FINISHED'")
    rows, notes = {}, []
    for run in sorted(runs, key=lambda r: r.info.start_time):
        tags = run.data.tags
        if "sweep_job_key" not in tags or SUPERSEDED_TAG in tags:
            continue
        setting, arm, seed = parse_job_key(tags["sweep_job_key"])
        row = {"setting": setting, "arm": arm, "seed": seed, "run_id": run.info.run_id}
        row.update({k: run.data.metrics.get(m) for k, m in METRICS.items()})
        row["wall_s"] = float(tags["wall_s"]) if "wall_s" in tags else None
        if (setting, arm, seed) in rows:
            notes.append(f"{setting} / {arm} / seed {seed}: two finished runs, the newer kept")
        rows[(setting, arm, seed)] = row
    return [rows[k] for k in sorted(rows)], notes
