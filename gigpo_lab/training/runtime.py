"""``LightningRuntime``: where and how the loop runs, built from the ``lightning`` config node.

``instantiate(cfg.lightning)`` gives one; a strategy given as a ``_target_`` node arrives already built (Hydra
instantiates it recursively). ``check`` refuses a strategy the lab cannot run, ``apply_threads`` sets torch's CPU threads before anything computes, and
``trainer(**loop)`` builds the Lightning ``Trainer`` with these settings plus the loop's own arguments
(``max_epochs``, the callbacks), so no key is copied by hand.

The schema (``gigpo_lab.training.schema.LightningConfig``) already types every value; the one thing it cannot
see is which strategy *class* a name stands for, checked here by type.
"""

from __future__ import annotations

from typing import Any

from gigpo_lab.errors import ConfigError


def strategy_class(strategy: Any) -> tuple[type | None, str]:
    """(the Lightning strategy class, its process start method) of a strategy name or object; (None, "")
    for ``auto`` or a name Lightning does not register (Lightning itself refuses an unknown name)."""
    if not isinstance(strategy, str):
        # private: a built DDP strategy keeps its start method nowhere public (lightning pinned in pyproject.toml)
        return type(strategy), str(getattr(strategy, "_start_method", "popen"))
    from lightning.pytorch.strategies import StrategyRegistry

    if strategy not in StrategyRegistry:
        return None, ""
    entry = StrategyRegistry[strategy]  # {"strategy": class, "init_params": {...}}: nothing built
    return entry["strategy"], str(entry["init_params"].get("start_method", "popen"))


def check_strategy(strategy: Any) -> None:
    """Refuse the strategies the lab cannot run correctly yet, by their class.

    Lightning's FSDP1 strategy (``FSDPStrategy``, ``strategy=fsdp``) and a ``ModelParallelStrategy`` other
    than the lab's ``ShardedStrategy``: ``lightning=fsdp`` is the lab's FSDP (``gigpo_lab/training/fsdp.py``
    says why FSDP2); the module shards and gathers the policy for that strategy only. A DDP strategy that
    spawns or forks its workers (``ddp_spawn``, ``ddp_fork``, ``ddp_notebook``): the iterations run in
    worker processes, so the process that called ``train`` holds none of their state to save or report.
    """
    # Lightning's default has no registered class: nothing to refuse, and Lightning is not imported for it
    if strategy == "auto":
        return
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy

    from gigpo_lab.training.fsdp import ShardedStrategy

    cls, start_method = strategy_class(strategy)
    name = strategy if isinstance(strategy, str) else f"{type(strategy).__module__}.{type(strategy).__name__}"
    sharding = cls is not None and issubclass(cls, FSDPStrategy | ModelParallelStrategy)
    if sharding and not issubclass(cls, ShardedStrategy):
        raise ConfigError(
            f"lightning.strategy={name} is not the lab's sharding: use lightning=fsdp (FSDP2 with the weights "
            "gathered for each rollout, gigpo_lab/training/fsdp.py)"
        )
    if cls is not None and issubclass(cls, DDPStrategy) and start_method != "popen":
        raise ConfigError(
            f"lightning.strategy={name} runs the iterations in worker processes, whose final state this process "
            "cannot save or report; use lightning=ddp (Lightning relaunches the command once per device)"
        )


class LightningRuntime:
    """The ``lightning`` node, built: Lightning's Trainer arguments and the torch runtime.

    Args: as ``LightningConfig`` (``gigpo_lab/training/schema.py``), where each is documented.
    """

    def __init__(
        self,
        *,
        accelerator: str = "cpu",
        devices: Any = 1,
        num_nodes: int = 1,
        strategy: Any = "auto",
        precision: str = "32-true",
        deterministic: bool = False,
        num_threads: int | None = None,
        progress_bar: bool = True,
    ) -> None:
        self.trainer_args = {
            "accelerator": str(accelerator),
            "devices": devices,
            "num_nodes": int(num_nodes),
            "strategy": strategy,
            "precision": str(precision),
            "deterministic": deterministic,
        }
        self.num_threads, self.progress_bar = num_threads, progress_bar

    def check(self) -> None:
        """Raise ``ConfigError`` for a strategy the lab cannot run (``check_strategy``); called by ``train``
        before anything is written (outside ``instantiate``, which would wrap the error)."""
        check_strategy(self.trainer_args["strategy"])

    def apply_threads(self) -> None:
        """torch's CPU threads (``num_threads``; None leaves torch's default)."""
        import torch

        if self.num_threads:
            torch.set_num_threads(int(self.num_threads))

    def trainer(self, **loop: Any):
        """A ``lightning.Trainer`` with these settings and the loop's own arguments (``max_epochs``, ...)."""
        import lightning as L

        return L.Trainer(**self.trainer_args, **loop)
