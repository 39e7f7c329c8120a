"""``release_unwound_frames``: a signal's exception lets go of what its unwound frames held; an ordinary error
keeps its frames for a post-mortem debugger. The store-lock case itself is in ``test_sweep_parent.py``."""

from __future__ import annotations

import traceback
import weakref

import pytest

from gigpo_lab.tracking.sweep import Terminated
from gigpo_lab.tracking.unwound import release_unwound_frames


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
def test_a_signals_exception_lets_go_of_its_frames_locals_and_still_prints_in_full(error):
    err, ref = _caught(error)
    before = traceback.format_exception(err)
    assert ref() is not None  # the traceback keeps the frame's locals alive
    release_unwound_frames(err)
    assert ref() is None
    assert traceback.format_exception(err) == before


def test_an_ordinary_error_keeps_its_frames_locals():
    err, ref = _caught(ValueError("a bug in an estimator"))
    release_unwound_frames(err)
    assert ref() is not None


def test_an_error_raised_while_a_signal_unwound_lets_go_of_the_signals_frames():
    signal_err, ref = _caught(KeyboardInterrupt())
    try:
        try:
            raise signal_err
        except KeyboardInterrupt:
            raise RuntimeError("the store refused the cleanup write") from None
    except RuntimeError as err:
        assert err.__context__ is signal_err
        release_unwound_frames(err)
    assert ref() is None


def test_a_sweep_job_lets_go_of_what_a_signal_cut_short_before_its_last_writes(monkeypatch):
    """``gigpo-lab train``'s job (``cli.train.Job``) writes to the store on its way out (a resumed sweep's
    ``supersede``): a signal's exception raised in ``train`` has its frames released before that."""
    import gigpo_lab.train
    from gigpo_lab.cli.train import Job
    from gigpo_lab.config_paths import compose_config

    ref: list = []
    monkeypatch.setattr(gigpo_lab.train, "train", lambda cfg, reporter: _raise_holding(Terminated(143), ref))
    with pytest.raises(Terminated) as caught:
        Job(None)(compose_config([]))
    assert ref and ref[0]() is None, "the frame's locals outlived the job"
    assert caught.value.code == 143


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
