"""``ExceptionCheckpoint``: save the state when a run raises, so a failed run keeps a checkpoint.

Lightning's own ``OnExceptionCheckpoint`` also makes ``fit(ckpt_path=None)`` resume silently from
``last.ckpt`` when one exists in the folder; a fresh run must never do that, so the lab uses this instead.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L


class ExceptionCheckpoint(L.Callback):
    """On an exception inside ``fit``, write ``<dirpath>/on_exception.ckpt`` (weights before the failing step)."""

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "on_exception.ckpt"

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        trainer.save_checkpoint(self.path)
