"""``train(cfg)``: the lab's main job, readable as a table of contents.

``train`` checks the config, builds the parts (``build``: env factory, estimator checked against the env's
columns, loss, policy, engine, collector and the Lightning module; ``build_trainer``: the Trainer and its
callbacks), opens the MLflow run when training starts (``open_run``), fits, and returns the final metrics.

It knows no command line. What a person watching should see (a header, a progress line, a summary) goes
through the ``Reporter`` its caller passes: ``gigpo-lab train`` and ``python -m gigpo_lab.cli train``
(``gigpo_lab.cli.train``) pass one that prints; the default one logs.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from gigpo_lab.training.build_checks import POLICY_COLUMNS, check_policy, check_value_head, env_columns
from gigpo_lab.training.checkpoint_reading import checkpoint_run_id
from gigpo_lab.training.config_checks import validate_config
from gigpo_lab.training.distributed import RANK_VARIABLES, is_launch_rank_zero
from gigpo_lab.training.output_folder import output_dir
from gigpo_lab.training.run_names import run_name
from gigpo_lab.training.run_tags import run_tags

if TYPE_CHECKING:
    from gigpo_lab.training.run_cost import RunCost

log = logging.getLogger(__name__)


class Reporter:
    """What ``train`` tells its caller as the run goes. Here each hook logs or does nothing; the command line
    passes one that prints (``gigpo_lab.cli.train``)."""

    def header(self, cfg: DictConfig, store: str, out: Path, model: str) -> None:
        """Before anything is built, on the launch's rank 0: what runs, and where it is written."""
        log.info("training on %s with model %s; store %s, output %s", cfg.env.name, model, store, out)

    def progress(self, source, iterations: int) -> list:
        """Lightning callbacks that show progress (when ``lightning.progress_bar``); ``source`` is the run's
        ``IterationLogger`` (its ``history`` holds each iteration's metrics)."""
        return []

    def run_opened(self, run_id: str) -> None:
        """The MLflow run is open (global rank 0, when training starts)."""

    def summary(self, metrics: dict[str, float], uri: str, run_id: str, ckpt_dir: Path) -> None:
        """The run has finished (global rank 0)."""
        log.info("run %s finished in %s; checkpoints in %s", run_id, uri, ckpt_dir)


def train(cfg: DictConfig, reporter: Reporter | None = None) -> dict[str, float]:
    """Train one agent as ``cfg`` says; return the final metrics (the last value of every metric).

    What the config alone can refuse (a bad value, a missing required key, a strategy the lab cannot run, a
    model folder that does not exist) is refused first, with a ``ConfigError``, before anything is written.
    The MLflow run opens only when training starts, once every rank is up (``IterationLogger.on_fit_start``),
    so a launch that dies before that leaves no run behind. Every failure after the run opens (a crash
    mid-run, an interrupt) ends that run with status FAILED and an ``error`` tag, and re-raises; checkpoints
    written so far are kept. Once the run has started, an unreachable store no longer stops training: writes
    are buffered (``BufferedRun``). In a multi-process job only global rank 0 opens and writes the MLflow run
    (``gigpo_lab.training.distributed``); the other ranks return their own final metrics. ``reporter`` is told
    what a person watching would see: the header, the progress, the summary (by default they are logged).
    """
    from gigpo_lab.training.cpu_time import cpu_seconds

    # a run's CPU cost includes importing torch, building its envs (game generation) and model
    cpu_start = cpu_seconds()
    reporter = reporter if reporter is not None else Reporter()
    runtime, loop = _checked_settings(cfg)
    out = output_dir(cfg)
    tracker = _checked_tracker(cfg)
    if is_launch_rank_zero():
        reporter.header(cfg, tracker.uri, out, tracker.tags.get("model", "?"))

    # Lightning is first imported here, once the config, the strategy (``auto`` needs no import) and the store
    # have passed their checks, so a refusal answers without it (and without torch, unless the loop settings'
    # optimizer class was built). The run's cost counts from ``cpu_start``, so these imports are still in it.
    import lightning as L

    from gigpo_lab.training.run_cost import RunCost

    _quiet_lightning()
    runtime.apply_threads()
    module = build(cfg, loop)
    progress = reporter.progress if runtime.progress_bar else None
    cost = RunCost(cpu_start)
    logger_cb, trainer = build_trainer(
        runtime, loop, out, _run_opener(cfg, out, tracker, reporter), progress, extra=[cost]
    )
    _check_tracking_rank(trainer, tracking=is_launch_rank_zero())

    L.seed_everything(cfg.seed, verbose=False)
    cost.start_wall()
    _fit(trainer, module, logger_cb, cfg.ckpt_path)
    return _finish(cfg, trainer, logger_cb, out, cost, reporter)


def build(cfg: DictConfig, loop=None):
    """The ``GiGPOModule`` that ``train`` fits, from ``cfg`` alone (no Trainer, no MLflow run): env factory,
    estimator (its columns checked before any rollout), loss, policy, engine, collector, and the module that
    trains them with the ``loop`` settings (default: ``instantiate(cfg.trainer)``). Scripts that drive the
    parts by hand (``experiments/``) start here."""
    from hydra.utils import instantiate

    from gigpo_lab.algorithm import check_requirements
    from gigpo_lab.rollout.collector import Collector
    from gigpo_lab.training.module import GiGPOModule

    env_fn = partial(instantiate, cfg.env)
    estimator = instantiate(cfg.estimator)
    probe = env_fn()  # one env, built once: its reset info and its vocabulary
    try:
        # the critic's values come from the trainer's policy, whose head check_value_head checks once it is built
        check_requirements(estimator, env_columns(probe) | set(POLICY_COLUMNS))
        loss = instantiate(cfg.loss, estimator=estimator)  # loss.kl_in_reward null: the estimator's default
        policy = _build_policy(cfg, probe.unwrapped.vocabulary(), probe.unwrapped.action_names)
    finally:
        probe.close()
    check_policy(policy, cfg.model)
    check_value_head(estimator, policy, cfg.model)
    engine = instantiate(cfg.rollout.engine)(policy=policy)
    collector = Collector(
        env_fn,
        policy,
        engine,
        groups=cfg.rollout.groups,
        group_size=cfg.rollout.group_size,
        max_env_error_rate=cfg.rollout.max_env_error_rate,
    )
    return GiGPOModule(
        policy,
        estimator,
        loss,
        collector,
        engine,
        loop if loop is not None else instantiate(cfg.trainer),
        seed=cfg.seed,
        eval_episodes=cfg.rollout.eval_episodes,
        eval_greedy=cfg.rollout.eval_greedy,
        eval_temperature=cfg.rollout.eval_temperature,
        eval_greedy_episodes=cfg.rollout.eval_greedy_episodes,
        logprob_temperature=cfg.rollout.temperature,
        exploration=instantiate(cfg.exploration),
        group_filter=instantiate(cfg.group_filter),
    )


def _build_policy(cfg: DictConfig, vocabulary, actions):
    """The configured policy; a model folder that does not load is one sentence naming ``model.path``."""
    from hydra.utils import instantiate

    try:
        return instantiate(cfg.model)(vocabulary=vocabulary, actions=list(actions))
    except (OSError, ValueError) as err:
        if "path" not in cfg.model or str(err).startswith("model."):  # our own messages name their key first
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(
            f"model.path={cfg.model.path} could not be loaded as a model ({type(err).__name__}: {first[:300]}); "
            "point it at a Hugging Face model folder with config.json, weights and tokenizer files"
        ) from err


def build_trainer(
    runtime, loop, out: Path, open_run: Callable, progress: Callable | None = None, extra: list | None = None
):
    """The Lightning Trainer (``runtime``: the built ``lightning`` node) and its callbacks: iteration logging
    (it calls ``open_run()`` on global rank 0 when training starts), checkpoints every
    ``loop.checkpoint_every`` iterations, the record of a failed rank in the run (``RankFailures``), the
    callbacks in ``extra`` (``train``'s ``RunCost``), and what ``progress(logger, iterations)`` returns (the
    progress line). Returns ``(logger, trainer)``."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.training.checkpointing import AtomicCheckpointIO, ExceptionCheckpoint
    from gigpo_lab.training.rank_failures import RankFailures

    # the frozen reference model is in eval mode on purpose; Lightning warns about any module in eval mode
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode", category=UserWarning)
    ckpt_dir = out / "checkpoints"
    logger_cb = IterationLogger(open_run=open_run)
    callbacks = [
        logger_cb,
        # after the logger (the run is open), before ExceptionCheckpoint (its collectives wait for every rank)
        RankFailures(logger_cb),
        ModelCheckpoint(
            dirpath=ckpt_dir,
            filename="iter{epoch:04d}",
            auto_insert_metric_name=False,  # iter0003.ckpt, not iterepoch=0003.ckpt
            every_n_epochs=loop.checkpoint_every,
            save_top_k=-1
            if loop.keep_checkpoints
            else 0,  # 0: last.ckpt alone, rewritten every checkpoint_every
            save_last=True,
            save_on_train_epoch_end=True,
        ),
        ExceptionCheckpoint(ckpt_dir),
        *(extra or []),
    ]
    if progress is not None:
        callbacks += progress(logger_cb, loop.iterations)
    trainer = runtime.trainer(
        max_epochs=loop.iterations,  # one epoch per iteration (gigpo_lab/training/data.py)
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],  # a checkpoint file is whole or absent (full disk, SIGKILL)
        logger=False,
        enable_progress_bar=False,  # the caller's progress callbacks instead (the CLI's one-line ProgressLine)
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(out),
    )
    return logger_cb, trainer


def open_run(cfg: DictConfig, out: Path, tracker):
    """The run's writer, opened on global rank 0 when training starts: the run started (or continued from the
    checkpoint's run, its metric points listed so none is written twice), secrets redacted from the params
    and the config artifact; later writes buffered while the store is unreachable."""
    from gigpo_lab.tracking import flatten_config
    from gigpo_lab.tracking.buffer import BufferedRun
    from gigpo_lab.tracking.mlflow_tracker import redact_secrets

    fresh = tracker.run_id is None
    tracker.start()
    if fresh:
        shown = redact_secrets(OmegaConf.to_container(cfg, resolve=True))
        tracker.log_params(flatten_config(shown))
        tracker.log_text(OmegaConf.to_yaml(shown), "config.yaml")
    return BufferedRun(tracker, out, skip=() if fresh else tracker.logged_points())


def record_failed_job(cfg: DictConfig, err: BaseException) -> str:
    """A sweep job that failed before its run opened (a bad value in one job of the grid): a FAILED child run
    of the sweep with the reason, so the sweep's summary counts it and ``compare`` lists it. Returns its id."""
    from gigpo_lab.tracking import MlflowTracker, default_tracking_uri
    from gigpo_lab.tracking.sweep_env import sweep_context
    from gigpo_lab.tracking.sweep_resume import job_key_tag

    try:
        name, tags = run_name(cfg), run_tags(cfg)
    except Exception:  # the config is too broken to name the run: the job's overrides name it
        name, tags = "failed-job", job_key_tag()  # still known to a resumed sweep by its job key
    tracker = MlflowTracker(
        cfg.tracking.uri or default_tracking_uri(),
        cfg.tracking.experiment,
        run_name=name,
        tags=tags,
        parent_run_id=sweep_context()[0],
    )
    tracker.start()
    tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
    tracker.end("FAILED")
    return tracker.run_id


def _checked_settings(cfg: DictConfig):
    """``(runtime, loop)``: the config checked (``ConfigError``), the built ``lightning`` node (a strategy the lab
    cannot run refused by its class) and the loop settings (``TrainerConfig``, the optimizer a partial)."""
    from hydra.utils import instantiate

    validate_config(cfg)
    runtime = instantiate(cfg.lightning)
    runtime.check()
    return runtime, instantiate(cfg.trainer)


def _checked_tracker(cfg: DictConfig):
    """The run's ``MlflowTracker``, not started: its run id read off ``ckpt_path`` (a bad checkpoint raises)
    and its store checked reachable (fails fast). Every rank checks, so what would stop rank 0 from opening the
    run stops the others too, instead of leaving them waiting for rank 0 until the process-group timeout
    (srun and submitit do not kill the other tasks)."""
    from gigpo_lab.tracking import MlflowTracker, default_tracking_uri
    from gigpo_lab.tracking.sweep_env import sweep_context

    tracker = MlflowTracker(
        cfg.tracking.uri or default_tracking_uri(),
        cfg.tracking.experiment,
        run_name=run_name(cfg),
        tags=run_tags(cfg),
        run_id=checkpoint_run_id(cfg.ckpt_path),
        parent_run_id=sweep_context()[0],
    )
    tracker.check_reachable(creates=is_launch_rank_zero())  # rank 0 alone creates a new sqlite store
    return tracker


def _quiet_lightning() -> None:
    """After ``import lightning``: drop the console handler Lightning adds to its logger when the process has
    its own logging (Hydra's), so that each Lightning message is printed by that config alone, once."""
    if not logging.getLogger().handlers:
        return  # no logging config (``train(cfg)`` from Python): Lightning's handler is the only one
    logger = logging.getLogger("lightning")
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)


def _run_opener(cfg: DictConfig, out: Path, tracker, reporter: Reporter) -> Callable:
    """What ``IterationLogger`` calls on global rank 0 when training starts: ``open_run``, then the reporter told."""

    def opened():
        run = open_run(cfg, out, tracker)
        reporter.run_opened(tracker.run_id)
        return run

    return opened


def _check_tracking_rank(trainer, *, tracking: bool) -> None:
    """The launch variables and the Trainer must agree on which process is global rank 0 (the one that tracks)."""
    if trainer.is_global_zero != tracking:
        shown = {k: os.environ[k] for k in RANK_VARIABLES if k in os.environ}
        raise RuntimeError(
            f"this process is global rank {trainer.global_rank} of {trainer.world_size}, but the rank variables "
            f"{shown or '(none set)'} say {'it is' if tracking else 'it is not'} rank 0, so the MLflow run "
            "would be tracked by the wrong process or by none; unset the stale variables (a leftover "
            "LOCAL_RANK or RANK in the shell) or launch through Lightning, torchrun or srun"
        )


def _fit(trainer, module, logger_cb, ckpt_path) -> None:
    """``trainer.fit``; on any failure the open run is flushed, tagged with the error (unless a rank's failure
    is already recorded there: ``gigpo_lab.training.rank_failures``) and ended FAILED, and the error re-raised
    (the checkpoints written so far stay)."""
    from gigpo_lab.tracking.unwound import release_unwound_frames
    from gigpo_lab.training.rank_failures import failure_recorded

    try:
        # the checkpoint was already loaded with weights_only=True by checkpoint_run_id: plain contents only
        trainer.fit(module, ckpt_path=ckpt_path, weights_only=True)
    except BaseException as err:
        release_unwound_frames(err)  # a store read that a signal cut short would hold the store's lock
        logger_cb.flush(module)
        if logger_cb.tracker is not None:
            if not failure_recorded(trainer):
                logger_cb.tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
            logger_cb.tracker.end("FAILED")
        raise


def _finish(
    cfg: DictConfig, trainer, logger_cb, out: Path, cost: RunCost, reporter: Reporter
) -> dict[str, float]:
    """After ``fit``: ``last.ckpt`` (a collective: every rank calls it, rank 0 writes), and on global rank 0 the
    checkpoint artifact, the run's cost (``RunCost``: its wall seconds in ``fit`` and its CPU seconds from
    when ``train`` began, so building the envs and the model is in it, over every process that ran it), and
    the run ended (KILLED if interrupted); the final metrics. ``time/cpu_s`` is the run's cost whatever else
    the machine runs; other ranks are not in it."""
    ckpt_dir = out / "checkpoints"
    trainer.save_checkpoint(ckpt_dir / "last.ckpt")
    metrics = logger_cb.final_metrics()
    run = logger_cb.tracker
    if run is None:
        return metrics
    if cfg.tracking.log_checkpoint:
        run.log_artifact(ckpt_dir / "last.ckpt", "checkpoints")
    metrics.update({f"time/{key}": value for key, value in cost.spent().items()})
    run.set_tags({"wall_s": f"{metrics['time/wall_s']:.1f}", "cpu_s": f"{metrics['time/cpu_s']:.1f}"})
    run.end("KILLED" if trainer.interrupted else "FINISHED")
    if cfg.tracking.row_file and not trainer.interrupted:
        from gigpo_lab.study.rows import write_run_row

        write_run_row(
            Path(cfg.tracking.row_file), dict(cfg.tracking.tags), int(cfg.seed), run.run_id, metrics, out
        )
    reporter.summary(metrics, run.tracker.uri, run.run_id, ckpt_dir)
    return metrics
