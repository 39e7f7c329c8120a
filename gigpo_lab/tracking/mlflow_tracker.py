"""An MLflow run with batched writes.

Per-call ``log_metric`` costs about 9 ms a value on sqlite and 23-64 ms over HTTP (ENVIRONMENT.md), so
every write here goes through one ``MlflowClient.log_batch`` call per iteration. The client is created
lazily so that importing this module does not import mlflow (2.5 s).

Over HTTP, MLflow's client retries a failed request 7 times with exponential back-off (minutes). Here the
reachability check gets no retries and a short timeout, and training writes a few retries and a bounded
timeout; a write that still fails is buffered by ``gigpo_lab.tracking.buffer.BufferedRun``, not retried
for minutes while training waits. ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` / ``MLFLOW_HTTP_REQUEST_TIMEOUT``
set by the user win for the writes.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gigpo_lab.tracking.store_template import seed_store

#: MLflow's per-request limits for ``log_batch`` (params and metrics).
_MAX_PARAMS_PER_BATCH = 100
_MAX_METRICS_PER_BATCH = 1000
#: HTTP retries and timeout (s) of the reachability check: a dead server is reported in seconds.
CHECK_RETRIES, CHECK_TIMEOUT_S = 0, 5
#: HTTP retries and timeout (s) of a training write (unless the user set MLflow's variables).
WRITE_RETRIES, WRITE_TIMEOUT_S = 2, 20
#: Words that mark a config key as a secret (matched against the parts of its last name, split at ``_``/``-``).
SECRET_WORDS = frozenset(
    {"token", "password", "passwd", "secret", "credential", "credentials", "apikey", "key", "auth"}
)
REDACTED = "***"
#: The experiment tag of MLflow's ``ExperimentKind`` and its "custom model development" value. MLflow 3.17's UI
#: no longer reads it to choose GenAI or model-training mode: ``useExperimentKind`` in
#: ``mlflow/server/js/src/experiment-tracking/utils/ExperimentKindUtils.ts`` derives the kind from the
#: workflow type when ``shouldEnableWorkflowBasedNavigation()`` is true, as it is in the open-source build
#: (see ``gigpo_lab.ui``). Written anyway: it labels the experiment for MLflow's API and older 3.x UIs.
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
#: Prefix of the experiment tags that hold MLflow's saved views of the runs table ("Views" menu; opened by
#: ``#/experiments/<id>/runs?viewStateShareKey=<view id>``): ``useSharedExperimentViewState.ts`` and
#: ``savedViewEnvelope`` in ``mlflow/server/js/src/experiment-tracking/components/experiment-page/``.
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: The run tag MLflow's UI shows as the run's description (markdown).
NOTE_TAG = "mlflow.note.content"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///<path>`` URI; None for any other store (a server, a file store)."""
    prefix = "sqlite:///"
    return Path(uri[len(prefix) :]) if uri.startswith(prefix) else None


def default_tracking_uri(root: str | os.PathLike | None = None) -> str:
    """The lab's default store: ``sqlite:///<root>/mlflow.db`` (root defaults to the working directory)."""
    root_path = Path(root) if root is not None else Path.cwd()
    return f"sqlite:///{root_path.resolve() / 'mlflow.db'}"


#: The columns of a sweep's view: ω (a param), the estimator and seed (run tags) and the last logged eval success.
VIEW_COLUMNS = (
    "params.`estimator.step_advantage_weight`",
    "tags.`estimator`",
    "tags.`seed`",
    "metrics.`eval/success_rate`",
)


def experiment_view(run_filter: str, swept_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A saved-view state for MLflow's runs table: the runs matching ``run_filter``, sorted by name, with
    ``VIEW_COLUMNS`` and each swept config key (``trainer.lr`` -> its param) as columns, and the chart view
    filtered to the success-rate charts. The field names are MLflow 3.17's ``ExperimentPageUIState`` and
    search facets (``models/ExperimentPageUIState.tsx``; a column is ``<type>.`<key>```)."""
    columns = list(VIEW_COLUMNS)
    for key in swept_keys:
        column = f"params.`{key}`"
        if "." in key and column not in columns:  # dotted keys are params; a config group (estimator=) is not
            columns.append(column)
    return {
        "searchFilter": run_filter,
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "selectedColumns": columns,
        "chartsSearchFilter": "success_rate",
    }


def flatten_config(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested mapping to ``{"a.b.c": "value"}`` strings, the form MLflow params take."""
    out: dict[str, str] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_config(value, prefix=f"{name}."))
        else:
            out[name] = str(value)
    return out


def is_secret_key(name: str) -> bool:
    """Whether a (dotted) config key names a secret: ``tracking.api_token`` yes, ``rollout.max_new_tokens`` no."""
    last = str(name).rsplit(".", 1)[-1].lower()
    return any(part in SECRET_WORDS for part in re.split(r"[_\-]", last))


def redact_secrets(cfg: Any) -> Any:
    """A copy of a nested mapping/list with the value of every secret-looking key replaced by ``***``.

    What MLflow receives (params and the ``config.yaml`` artifact) goes through this, so a token passed as
    ``+tracking.api_token=...`` never reaches the store.
    """
    if isinstance(cfg, Mapping):
        return {
            k: (REDACTED if is_secret_key(k) and v is not None else redact_secrets(v)) for k, v in cfg.items()
        }
    if isinstance(cfg, list | tuple):
        return [redact_secrets(v) for v in cfg]
    return cfg


@contextlib.contextmanager
def http_limits(uri: str, retries: int, timeout_s: int, override: bool) -> Iterator[None]:
    """Set MLflow's HTTP retry count and timeout for the requests inside the block (http(s) URIs only).

    ``override=False`` keeps values the user exported. MLflow reads both variables on every request.
    """
    if not str(uri).startswith(("http://", "https://")):
        yield
        return
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries), "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
    saved = {k: os.environ.get(k) for k in wanted}
    for k, v in wanted.items():
        if override or saved[k] is None:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class MlflowTracker:
    """One MLflow run: created fresh, or continued when ``run_id`` is given (resume).

    Args:
        uri: tracking URI (``sqlite:///…/mlflow.db`` or ``http://host:port``).
        experiment: experiment name; created if absent.
        run_name: the run's display name (e.g. ``gigpo-w1-s0-frozenlake``).
        tags: tags set at start (estimator, env, model, seed, git commit, sweep id, …).
        run_id: continue this run instead of creating one.
        parent_run_id: make the new run a nested child of this run (sweeps).
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str | None = None,
        tags: Mapping[str, str] | None = None,
        run_id: str | None = None,
        parent_run_id: str | None = None,
    ) -> None:
        self.uri, self.experiment, self.run_name = uri, experiment, run_name
        self.tags = dict(tags or {})
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            path = sqlite_file(self.uri)
            if path is not None and not path.exists() and path.parent.is_dir():
                seed_store(path)  # the store MLflow would create, without re-running its migrations
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def check_reachable(self, creates: bool = True) -> None:
        """Fail fast (seconds: no HTTP retries), before any rollout, when the store cannot be reached or written.

        ``creates`` false (a rank other than 0 of a job): a sqlite store that does not exist yet is not created
        here, only its folder checked. Rank 0 creates it when it opens the run; two processes creating one new
        sqlite store at once race on its tables (``duplicate column name``), as ranks that srun or torchrun
        start together would.
        """
        path = sqlite_file(self.uri)
        if not creates and path is not None and not path.exists():
            if not (path.parent.is_dir() and os.access(path.parent, os.W_OK)):
                raise RuntimeError(
                    f"the MLflow store {self.uri!r} cannot be reached (no writable folder {path.parent}); "
                    "create the folder or fix tracking.uri (default: sqlite:///<cwd>/mlflow.db)"
                )
            return
        try:
            with http_limits(self.uri, CHECK_RETRIES, CHECK_TIMEOUT_S, override=True):
                self.client.search_experiments(max_results=1)
        except Exception as err:  # mlflow raises several types for a bad store
            raise RuntimeError(
                f"the MLflow store {self.uri!r} cannot be reached ({type(err).__name__}: {err}); "
                "start the server or fix tracking.uri (default: sqlite:///<cwd>/mlflow.db)"
            ) from err
        if self.run_id is not None:
            self._check_run_exists()

    def _missing_run(self, err: Exception) -> RuntimeError | None:
        """The sentence to raise when a lookup of the checkpoint's run failed because the store does not hold
        it; None for any other failure (re-raise it as it is)."""
        if getattr(err, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
            return None
        return RuntimeError(
            f"the checkpoint's MLflow run {self.run_id} is not in the store {self.uri!r}; resume with "
            "the tracking.uri of the run that wrote the checkpoint"
        )

    def _check_run_exists(self) -> None:
        """A resumed run must be in this store (reading only, so a refusal writes nothing)."""
        try:
            with http_limits(self.uri, CHECK_RETRIES, CHECK_TIMEOUT_S, override=True):
                self.client.get_run(self.run_id)
        except Exception as err:
            missing = self._missing_run(err)
            if missing is None:
                raise
            raise missing from err

    def start(self) -> str:
        """Create (or reopen, when ``run_id`` is set) the run and return its id."""
        from mlflow.entities import RunTag

        client = self.client
        if self.run_id is not None:
            try:
                with self._write_limits():
                    client.update_run(self.run_id, status="RUNNING")
            except Exception as err:
                missing = self._missing_run(err)
                if missing is None:
                    raise
                raise missing from err
            return self.run_id
        exp_id = self.experiment_id()
        tags = dict(self.tags)
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = client.create_run(exp_id, run_name=self.run_name, tags=tags)
        self.run_id = run.info.run_id
        if tags:
            client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        return self.run_id

    def save_view(self, view_id: str, name: str, state: Mapping[str, Any]) -> None:
        """Store a saved view of the experiment's runs table (``experiment_view`` builds ``state``)."""
        import json

        now = int(time.time() * 1000)
        envelope = {"name": name, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
        with self._write_limits():
            self.client.set_experiment_tag(
                self.experiment_id(), VIEW_TAG_PREFIX + view_id, json.dumps(envelope)
            )

    def experiment_id(self) -> str:
        """The experiment's id; created (or, made by an older lab, tagged) as a model-training experiment, so
        that MLflow 3's UI opens it on the runs table, not on the GenAI traces overview."""
        client = self.client
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            return client.create_experiment(self.experiment, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
        if EXPERIMENT_KIND_TAG not in exp.tags:
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return exp.experiment_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params in batches of MLflow's limit (100 a request)."""
        from mlflow.entities import Param

        items = [Param(k, str(v)) for k, v in params.items()]
        with self._write_limits():
            for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
                self.client.log_batch(self.run_id, params=items[i : i + _MAX_PARAMS_PER_BATCH])

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        """Log one iteration's metrics in a single ``log_batch`` request (non-finite values are kept as NaN).

        ``timestamp_ms`` is when they were measured (default now); buffered metrics keep their own.
        """
        from mlflow.entities import Metric

        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        items = [Metric(k, float(v), ts, int(step)) for k, v in metrics.items()]
        with self._write_limits():
            for i in range(0, len(items), _MAX_METRICS_PER_BATCH):
                self.client.log_batch(self.run_id, metrics=items[i : i + _MAX_METRICS_PER_BATCH])

    def logged_points(self) -> set[tuple[str, int]]:
        """Every ``(metric key, step)`` the run already holds (a resumed run does not write them again)."""
        client = self.client
        keys = client.get_run(self.run_id).data.metrics
        return {(k, m.step) for k in keys for m in client.get_metric_history(self.run_id, k)}

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        with self._write_limits():
            self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        with self._write_limits():
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        with self._write_limits():
            self.client.log_text(self.run_id, text, artifact_file)

    def end(self, status: str = "FINISHED") -> None:
        """Close the run with ``FINISHED``, ``FAILED`` or ``KILLED``."""
        if self.run_id is not None:
            with self._write_limits():
                self.client.set_terminated(self.run_id, status=status)

    def _write_limits(self):
        return http_limits(self.uri, WRITE_RETRIES, WRITE_TIMEOUT_S, override=False)
