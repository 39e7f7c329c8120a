"""Where one training run's time goes: wall seconds per phase, from timers wrapped around the lab's functions.

Runs ``gigpo-lab train`` (``gigpo_lab.cli.train.main``) in this process (pass Hydra overrides as arguments; one thread and no progress
bar are added) with timers around the phases, then prints a table of wall and CPU seconds (on a shared
machine the CPU seconds are the steadier figure). Times are inclusive: an indented row is
part of the row above it. "other" rows are the parent minus its listed children (Lightning's loop, the
closure, Python glue). No numerics change: the wrappers only read the clock.

Usage (from the repo root; PYTHONPATH picks the tree to profile)::

    PYTHONPATH=$PWD python experiments/bench/profile_run.py tracking.uri=sqlite:////tmp/p/mlflow.db \
        hydra.run.dir=/tmp/p/hydra
"""

from __future__ import annotations

import functools
import sys
import time
from collections import defaultdict

START = time.perf_counter()
START_CPU = time.process_time()
TOTALS: dict[str, float] = defaultdict(float)
CPU: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
MARKS: dict[str, float] = {}


def timed(owner, attr: str, name: str) -> None:
    """Replace ``owner.attr`` by a wrapper that adds its wall time to ``TOTALS[name]``."""
    inner = getattr(owner, attr)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            TOTALS[name] += time.perf_counter() - t0
            CPU[name] += time.process_time() - c0
            CALLS[name] += 1

    setattr(owner, attr, wrapper)


def install() -> None:
    import importlib

    from lightning.pytorch import LightningModule

    import gigpo_lab.rollout.collector as collector
    import gigpo_lab.train as train
    from gigpo_lab.envs.text_actions import TextActionWrapper
    from gigpo_lab.policy.tiny import TinyPolicy
    from gigpo_lab.rollout.collector import Collector
    from gigpo_lab.rollout.torch_engine import TorchEngine
    from gigpo_lab.tracking.buffer import BufferedRun
    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.training.checkpointing import AtomicCheckpointIO
    from gigpo_lab.training.module import GiGPOModule

    MARKS["imports"] = time.perf_counter() - START
    MARKS["imports_cpu"] = time.process_time() - START_CPU
    timed(train, "train", "train()")
    timed(train, "open_run", "mlflow: open run (store, params)")
    timed(train, "build", "build envs, policy, engine")
    timed(train, "build_trainer", "build Trainer")
    timed(Collector, "collect", "rollout: collect")
    timed(collector, "run_episodes", "rollout: run_episodes")
    timed(TorchEngine, "generate", "rollout: engine.generate")
    timed(TextActionWrapper, "step", "rollout: env.step")
    timed(TinyPolicy, "build_prompt", "rollout: build_prompt")
    timed(GiGPOModule, "score", "old/ref scoring")
    timed(GiGPOModule, "prepare_iteration", "prepare_iteration")
    timed(GiGPOModule, "evaluate", "eval")
    timed(GiGPOModule, "minibatch_loss", "update: forward + loss")
    timed(LightningModule, "backward", "update: backward")
    timed(importlib.import_module("torch.optim.adam"), "adam", "update: AdamW math")
    timed(GiGPOModule, "on_before_optimizer_step", "update: grad norm")
    timed(LightningModule, "clip_gradients", "update: clip")
    timed(IterationLogger, "flush", "mlflow: iteration metrics + samples")
    timed(AtomicCheckpointIO, "save_checkpoint", "checkpoints")
    timed(BufferedRun, "log_artifact", "mlflow: checkpoint artifact")
    timed(BufferedRun, "end", "mlflow: end run")
    import lightning

    timed(lightning.Trainer, "fit", "Trainer.fit")


ROWS = (
    ("startup: imports (torch, lightning, mlflow, hydra)", "imports", 0),
    ("mlflow: open run (store, params)", None, 0),
    ("build envs, policy, engine", None, 0),
    ("build Trainer", None, 0),
    ("Trainer.fit", None, 0),
    ("prepare_iteration", None, 1),
    ("eval", None, 2),
    ("rollout: collect", None, 2),
    ("rollout: run_episodes", None, 3),
    ("rollout: engine.generate", None, 4),
    ("rollout: env.step", None, 4),
    ("rollout: build_prompt", None, 4),
    ("old/ref scoring", None, 2),
    ("update: forward + loss", None, 1),
    ("update: backward", None, 1),
    ("update: AdamW math", None, 1),
    ("update: grad norm", None, 1),
    ("update: clip", None, 1),
    ("mlflow: iteration metrics + samples", None, 1),
    ("checkpoints", None, 1),
    ("mlflow: checkpoint artifact", None, 0),
    ("mlflow: end run", None, 0),
)


INNER = (
    "prepare_iteration",
    "update: forward + loss",
    "update: backward",
    "update: AdamW math",
    "update: grad norm",
    "update: clip",
    "mlflow: iteration metrics + samples",
    "checkpoints",
)


def report(total: float, total_cpu: float) -> None:
    """The table: wall and CPU seconds per phase, the CPU share, and the calls."""
    print(f"\n{'phase':<54} {'wall s':>8} {'cpu s':>8} {'cpu %':>6} {'calls':>6}")

    def row(label: str, wall: float, cpu: float, calls: int | str = "") -> None:
        print(f"{label:<54} {wall:8.2f} {cpu:8.2f} {cpu / total_cpu:6.1%} {calls:>6}")

    for name, mark, depth in ROWS:
        if mark:
            row(name, MARKS[mark], MARKS[mark + "_cpu"], 1)
        else:
            row("  " * depth + name, TOTALS.get(name, 0.0), CPU.get(name, 0.0), CALLS.get(name, 0))
    glue = [m["Trainer.fit"] - sum(m[k] for k in INNER) for m in (TOTALS, CPU)]
    row("  Lightning loop + glue (fit minus the rows above)", *glue)
    row(
        "hydra compose, teardown, rest",
        total - MARKS["imports"] - TOTALS["train()"],
        total_cpu - MARKS["imports_cpu"] - CPU["train()"],
    )
    row("total (process)", total, total_cpu)


def main() -> None:
    install()
    from gigpo_lab.cli.train import main as train_command

    args = [*sys.argv[1:], "lightning.num_threads=1", "lightning.progress_bar=false"]
    try:
        train_command(args)
    finally:
        report(time.perf_counter() - START, time.process_time() - START_CPU)


if __name__ == "__main__":
    main()
