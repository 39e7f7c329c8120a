"""``train(cfg)``: the lab's main job, readable as a table of contents.

Build the env factory, the estimator (its required columns checked against what the env provides, before
any rollout), the loss, the policy, the rollout engine and collector, the Lightning module, the MLflow run
and the Trainer; fit; return the final metrics. ``main`` is the Hydra entry point behind
``gigpo-lab train`` and ``python -m gigpo_lab.train``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gigpo_lab.cli.console import (
    configure_output,
    print_header,
    print_job_line,
    print_summary,
    quiet_lightning,
)
from gigpo_lab.cli.help import register_help_resolver
from gigpo_lab.config_paths import conf_dir, in_multirun, register_schemas
from gigpo_lab.training.build_checks import check_policy, env_columns
from gigpo_lab.training.checkpoint_reading import checkpoint_run_id
from gigpo_lab.training.config_checks import validate_config
from gigpo_lab.training.distributed import RANK_VARIABLES, is_launch_rank_zero
from gigpo_lab.training.output_folder import output_dir
from gigpo_lab.training.run_names import run_name
from gigpo_lab.training.run_tags import run_tags


def train(cfg: DictConfig) -> dict[str, float]:
    """Train one agent as ``cfg`` says; return the final metrics (the last value of every metric).

    What the config alone can refuse (a bad value, a missing required key, a strategy the lab cannot run, a
    model folder that does not exist) is refused first, with a ``ConfigError``, before anything is written.
    The MLflow run opens only when training starts, once every rank is up (``IterationLogger.on_fit_start``),
    so a launch that dies before that leaves no run behind. Every failure after the run opens (a crash
    mid-run, an interrupt) ends that run with status FAILED and an ``error`` tag, and re-raises; checkpoints
    written so far are kept. Once the run has started, an unreachable store no longer stops training: writes
    are buffered (``BufferedRun``). In a multi-process job only global rank 0 opens and writes the MLflow run
    (``gigpo_lab.training.distributed``); the other ranks return their own final metrics.
    """
    from hydra.utils import instantiate

    validate_config(cfg)
    runtime = instantiate(cfg.lightning)
    runtime.check()  # a strategy the lab cannot run, refused by its class
    loop = instantiate(cfg.trainer)  # the loop settings (TrainerConfig), the optimizer a partial
    out = output_dir(cfg)
    # on every rank: an unreachable store or a bad checkpoint stops each rank at once, before any rollout
    tracker = _checked_tracker(cfg)
    if is_launch_rank_zero() and not in_multirun():
        print_header(cfg, tracker.uri, out, tracker.tags.get("model", "?"))
    import lightning as L

    quiet_lightning()
    runtime.apply_threads()
    module = build(cfg, loop)
    logger_cb, trainer = _build_trainer(runtime, loop, out, partial(_open_run, cfg, out, tracker))
    _check_tracking_rank(trainer, tracking=is_launch_rank_zero())
    L.seed_everything(cfg.seed, verbose=False)
    start = time.perf_counter()
    try:
        # the checkpoint was already loaded with weights_only=True by checkpoint_run_id: plain contents only
        trainer.fit(module, ckpt_path=cfg.ckpt_path, weights_only=True)
    except BaseException as err:
        logger_cb.flush(module)
        if logger_cb.tracker is not None:
            logger_cb.tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
            logger_cb.tracker.end("FAILED")
        raise
    run = logger_cb.tracker
    ckpt_dir = out / "checkpoints"
    trainer.save_checkpoint(ckpt_dir / "last.ckpt")  # a collective: every rank calls it, rank 0 writes
    metrics = logger_cb.final_metrics()
    if run is None:
        return metrics
    if cfg.tracking.log_checkpoint:
        run.log_artifact(ckpt_dir / "last.ckpt", "checkpoints")
    metrics["time/wall_s"] = time.perf_counter() - start
    run.set_tags({"wall_s": f"{metrics['time/wall_s']:.1f}"})
    run.end("KILLED" if trainer.interrupted else "FINISHED")
    if not in_multirun():
        print_summary(metrics, run.tracker.uri, run.run_id, ckpt_dir)
    return metrics


def _open_run(cfg: DictConfig, out: Path, tracker):
    """The run's writer, opened on global rank 0 when training starts: the run started (or continued from the
    checkpoint's run, its metric points listed so none is written twice), secrets redacted from the params
    and the config artifact; later writes buffered while the store is unreachable."""
    from gigpo_lab.tracking import flatten_config
    from gigpo_lab.tracking.buffer import BufferedRun
    from gigpo_lab.tracking.mlflow_tracker import redact_secrets

    fresh = tracker.run_id is None
    tracker.start()
    _OPENED_RUNS.append(tracker.run_id)
    if fresh:
        shown = redact_secrets(OmegaConf.to_container(cfg, resolve=True))
        tracker.log_params(flatten_config(shown))
        tracker.log_text(OmegaConf.to_yaml(shown), "config.yaml")
    return BufferedRun(tracker, out, skip=() if fresh else tracker.logged_points())


#: Run ids this process opened for the current job (a sweep job that fails before opening one is recorded).
_OPENED_RUNS: list[str] = []


def _record_failed_job(cfg: DictConfig, err: BaseException) -> None:
    """A sweep job that failed before its run opened (a bad value in one job of the grid): a FAILED child run
    of the sweep with the reason, so the sweep's summary counts it and ``compare`` lists it. A run alone
    (not a sweep) writes nothing in that case."""
    from gigpo_lab.tracking import MlflowTracker, default_tracking_uri
    from gigpo_lab.tracking.sweep import sweep_context

    try:
        name, tags = run_name(cfg), run_tags(cfg)
    except Exception:  # the config is too broken to name the run: the job's overrides name it
        name, tags = "failed-job", {}
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


def _checked_tracker(cfg: DictConfig):
    """The run's ``MlflowTracker``, not started: its run id read off ``ckpt_path`` (a bad checkpoint raises)
    and its store checked reachable (fails fast). Every rank checks, so what would stop rank 0 from opening the
    run stops the others too, instead of leaving them waiting for rank 0 until the process-group timeout
    (srun and submitit do not kill the other tasks)."""
    from gigpo_lab.tracking import MlflowTracker, default_tracking_uri
    from gigpo_lab.tracking.sweep import sweep_context

    tracker = MlflowTracker(
        cfg.tracking.uri or default_tracking_uri(),
        cfg.tracking.experiment,
        run_name=run_name(cfg),
        tags=run_tags(cfg),
        run_id=checkpoint_run_id(cfg.ckpt_path),
        parent_run_id=sweep_context()[0],
    )
    tracker.check_reachable()
    return tracker


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
        check_requirements(estimator, env_columns(probe))
        loss = instantiate(cfg.loss, estimator=estimator)  # loss.kl_in_reward null: the estimator's default
        policy = _build_policy(cfg, probe.unwrapped.vocabulary())
    finally:
        probe.close()
    check_policy(policy, cfg.model)
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
        logprob_temperature=cfg.rollout.temperature,
        exploration=instantiate(cfg.exploration),
    )


def _build_policy(cfg: DictConfig, vocabulary):
    """The configured policy; a model folder that does not load is one sentence naming ``model.path``."""
    from hydra.utils import instantiate

    try:
        return instantiate(cfg.model)(vocabulary=vocabulary)
    except (OSError, ValueError) as err:
        if "path" not in cfg.model or str(err).startswith("model."):  # our own messages name their key first
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(
            f"model.path={cfg.model.path} could not be loaded as a model ({type(err).__name__}: {first[:300]}); "
            "point it at a Hugging Face model folder with config.json, weights and tokenizer files"
        ) from err


def _build_trainer(runtime, loop, out: Path, open_run):
    """The Lightning Trainer (``runtime``: the built ``lightning`` node) and its callbacks: iteration logging
    (it calls ``open_run()`` on global rank 0 when training starts), checkpoints every
    ``loop.checkpoint_every`` iterations, the progress line."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from gigpo_lab.cli.progress import ProgressLine
    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.training.checkpointing import AtomicCheckpointIO, ExceptionCheckpoint

    # the frozen reference model is in eval mode on purpose; Lightning warns about any module in eval mode
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode", category=UserWarning)
    # trainer.target_kl skips the rest of an iteration's steps by returning None from training_step, on purpose
    warnings.filterwarnings("ignore", message=r"`training_step` returned `None`", category=UserWarning)
    ckpt_dir = out / "checkpoints"
    logger_cb = IterationLogger(open_run=open_run)
    callbacks = [
        logger_cb,
        ModelCheckpoint(
            dirpath=ckpt_dir,
            filename="iter{epoch:04d}",
            auto_insert_metric_name=False,  # iter0003.ckpt, not iterepoch=0003.ckpt
            every_n_epochs=loop.checkpoint_every,
            save_top_k=-1,
            save_last=True,
            save_on_train_epoch_end=True,
        ),
        ExceptionCheckpoint(ckpt_dir),
    ]
    if runtime.progress_bar and not in_multirun():  # a sweep's parallel jobs would interleave their lines
        callbacks.append(ProgressLine(logger_cb, loop.iterations))
    trainer = runtime.trainer(
        max_epochs=loop.iterations,
        gradient_clip_val=loop.gradient_clip_val,  # a loop setting (the update rule) that Lightning applies
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],  # a checkpoint file is whole or absent (full disk, SIGKILL)
        logger=False,
        enable_progress_bar=False,  # ProgressLine instead: 1-based iterations, one line within 100 columns
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(out),
    )
    return logger_cb, trainer


def _hydra_entry(cfg: DictConfig) -> float | None:
    """One Hydra job. In a multirun a failing job is logged (its MLflow run says FAILED) and the sweep goes
    on; the sweep callback then exits non-zero after the last job."""
    from hydra.core.hydra_config import HydraConfig

    sys.argv = list(_LAUNCH_ARGV) or sys.argv  # Lightning relaunches the other ranks from this command line
    verbose = bool(cfg.get("verbose", False))
    configure_output(verbose)  # again here: joblib's workers are fresh processes
    _OPENED_RUNS.clear()
    try:
        metrics = train(cfg)
    except Exception as err:
        if not in_multirun():
            _JOB_ERROR.append(err)  # ``main`` reports it (Hydra would print its own banner first)
            return None
        if not _OPENED_RUNS and is_launch_rank_zero():
            _record_failed_job(cfg, err)
        if verbose:
            logging.getLogger("gigpo_lab.train").exception("job %s failed", HydraConfig.get().job.num)
        print_job_line(cfg, HydraConfig.get().job.num, None, err)
        return None
    if in_multirun() and is_launch_rank_zero():
        print_job_line(cfg, HydraConfig.get().job.num, metrics)
    return metrics.get("eval/success_rate")


#: The command line this process was started with (``gigpo-lab train …`` keeps its ``train``). Hydra parses
#: its own argv (the overrides alone); the job puts this one back, because DDP's relaunch of the other ranks
#: re-runs ``sys.argv``, and every rank must enter through the same sub-command.
_LAUNCH_ARGV: list[str] = []
#: The error of a single run's job, raised again by ``main`` once Hydra has returned.
_JOB_ERROR: list[Exception] = []
#: Set (with HYDRA_FULL_ERROR=1) when ``main`` asked Hydra to re-raise, not the user: processes started from
#: this one (DDP's other ranks, joblib workers) inherit both and still report errors in one line.
_OWN_FULL_ERROR = "GIGPO_LAB_OWN_FULL_ERROR"


def _verbose(args: list[str]) -> bool:
    """``verbose=true`` among the overrides (read before Hydra composes: it chooses Hydra's logging)."""
    return any(re.fullmatch(r"\+*verbose=(true|True|1|yes)", a) for a in args)


def _wants_traceback(args: list[str]) -> bool:
    """``verbose=true``, or the user's own ``HYDRA_FULL_ERROR=1``."""
    user_full = os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(_OWN_FULL_ERROR) != "1"
    return _verbose(args) or user_full


def main(argv: list[str] | None = None) -> None:
    """``gigpo-lab train [overrides…]``: Hydra's CLI over ``train`` (``-m`` for multirun).

    A config mistake prints one or two lines that name the key and exits 2 before anything is written; any
    other failure prints one line and exits 1 (``verbose=true`` or ``HYDRA_FULL_ERROR=1``: the traceback).
    A sweep whose launcher dies ends its MLflow parent run FAILED with the reason.
    """
    from gigpo_lab.cli.errors import explain
    from gigpo_lab.tracking.sweep import FAILED_SWEEPS, TERMINATED, fail_open_sweeps

    args = sys.argv[1:] if argv is None else list(argv)
    register_schemas()
    register_help_resolver()
    _LAUNCH_ARGV[:] = sys.argv
    sys.argv = [sys.argv[0], *args]
    traceback_wanted = _wants_traceback(args)
    configure_output(_verbose(args))
    if _verbose(args):  # Hydra's own logging configs: every INFO line on the console
        sys.argv += ["hydra/hydra_logging=default", "hydra/job_logging=default"]
    saved = {k: os.environ.get(k) for k in ("HYDRA_FULL_ERROR", _OWN_FULL_ERROR)}
    if os.environ.get("HYDRA_FULL_ERROR") != "1":  # Hydra re-raises instead of printing its own report
        os.environ.update({"HYDRA_FULL_ERROR": "1", _OWN_FULL_ERROR: "1"})
    try:
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_hydra_entry)()
        if _JOB_ERROR:
            raise _JOB_ERROR.pop()
        if TERMINATED:
            raise TERMINATED.pop()
    except BaseException as err:
        fail_open_sweeps(err)
        if traceback_wanted or isinstance(err, SystemExit | KeyboardInterrupt):
            raise
        code, message = explain(err)
        sys.stderr.write(message + "\n")
        sys.exit(code)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if FAILED_SWEEPS:
        sys.stderr.write("\n".join(FAILED_SWEEPS) + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
