"""``release_unwound_frames``: a signal's exception lets go of what its unwound frames held; an ordinary error
keeps its frames for a post-mortem debugger. The store-lock case itself is in ``test_sweep_parent.py``."""

from __future__ import annotations

import weakref

import pytest

from gigpo_lab.tracking.sweep import Terminated
from gigpo_lab.tracking.unwound import release_unwound_frames
from tests.tracking.cut_short import read_cut_short


class Held:
    """Something a frame holds (a cursor, in the real case)."""


def _raise_holding(error: BaseException, ref: list) -> None:
    held = Held()
    ref.append(weakref.ref(held))
    raise error


def _caught(error: BaseException) -> tuple[BaseException, weakref.ref]:
    ref: list = []
    try:
        _raise_holding(error, ref)
    except BaseException as err:  # noqa: BLE001 - the point is to catch what a signal raises
        return err, ref[0]


@pytest.mark.parametrize("error", [Terminated(143), KeyboardInterrupt(), SystemExit(143)])
def test_a_signals_exception_lets_go_of_its_frames_locals(error):
    err, ref = _caught(error)
    assert ref() is not None  # the traceback keeps the frame's locals alive
    release_unwound_frames(err)
    assert ref() is None


def test_an_ordinary_error_keeps_its_frames_locals():
    err, ref = _caught(ValueError("a bug in an estimator"))
    release_unwound_frames(err)
    assert ref() is not None


@pytest.mark.parametrize(
    "cause", [None, ValueError("the store said no")], ids=["plain", "raised-from-another"]
)
def test_an_error_raised_while_a_signal_unwound_lets_go_of_the_signals_frames(cause):
    """An error raised while a signal's exception unwinds has it as ``__context__``, also when it is raised
    ``from`` another error (its ``__cause__``)."""
    signal_err, ref = _caught(KeyboardInterrupt())
    try:
        try:
            raise signal_err
        except KeyboardInterrupt:
            raise RuntimeError("the store refused the cleanup write") from cause
    except RuntimeError as err:
        assert err.__context__ is signal_err
        release_unwound_frames(err)
    assert ref() is None


def test_a_sweep_job_lets_go_of_what_a_signal_cut_short_before_its_last_write(monkeypatch):
    """``gigpo-lab train``'s job (``cli.train.Job``) writes to the store on its way out (a resumed sweep's
    ``supersede``): a signal's exception raised in ``train`` has its frames released before that write.
    (A stand-in for the resumed job's store record: only when ``supersede`` is called matters here.)"""
    from types import SimpleNamespace

    import gigpo_lab.cli.train as cli_train
    import gigpo_lab.train
    from gigpo_lab.config_paths import compose_config

    ref: list = []
    alive_at_supersede: list = []

    def train(cfg, reporter):
        reporter.run_opened("the job's run")
        _raise_holding(Terminated(143), ref)

    resumed = SimpleNamespace(
        finished=None, supersede=lambda run_id: alive_at_supersede.append(ref[0]() is not None)
    )
    monkeypatch.setattr(gigpo_lab.train, "train", train)
    monkeypatch.setattr(cli_train.ResumedJob, "of", staticmethod(lambda cfg: resumed))
    monkeypatch.setattr(cli_train, "configure_output", lambda verbose: None)  # leaves the worker's logging be
    with pytest.raises(Terminated):
        cli_train.Job(None)(compose_config([]))
    assert alive_at_supersede == [False], "the frame's locals were still alive at the job's last write"


def test_a_run_lets_go_of_what_a_signal_cut_short_in_fit_before_it_ends_the_run():
    """``train._fit`` flushes and ends the MLflow run after a failed ``fit``: a signal's exception raised inside
    ``fit`` has its frames released first. (Stand-ins for the Trainer and the logger: only ``fit`` raising and
    ``flush`` being called matter here.)"""
    from types import SimpleNamespace

    from gigpo_lab.train import _fit

    ref: list = []
    alive_at_flush: list = []
    trainer = SimpleNamespace(fit=lambda *a, **k: _raise_holding(KeyboardInterrupt(), ref))
    logger_cb = SimpleNamespace(
        tracker=None, flush=lambda module: alive_at_flush.append(ref[0]() is not None)
    )
    with pytest.raises(KeyboardInterrupt):
        _fit(trainer, None, logger_cb, None)
    assert alive_at_flush == [False], "the frame's locals were still alive when the run's writes began"


def test_a_failed_rank_is_recorded_past_a_store_read_a_signal_cut_short(tmp_path):
    """``RankFailures.on_exception`` runs inside Lightning's ``fit``, before ``train._fit`` can release anything,
    and writes the failed rank to the store: it releases first. (A stand-in for the Trainer of a one-host run
    with no launcher children; the store and the run are real.)"""
    from types import SimpleNamespace

    from gigpo_lab.tracking.mlflow_tracker import MlflowTracker
    from gigpo_lab.training.rank_failures import RankFailures

    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "ranks", run_name="run")
    tracker.start()
    failures = RankFailures(None)
    failures.run = {"uri": tracker.uri, "run_id": tracker.run_id}
    trainer = SimpleNamespace(global_rank=1, strategy=SimpleNamespace(launcher=None))

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        read_cut_short(tmp_path / "mlflow.db", interrupt)
    failures.on_exception(trainer, None, caught.value)  # with the exception, and its traceback, still alive
    run = tracker.client.get_run(tracker.run_id)
    assert failures.recorded and run.info.status == "FAILED" and run.data.tags["failed_rank"] == "1"
