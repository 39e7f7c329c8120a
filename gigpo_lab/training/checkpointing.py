"""Checkpoints that survive faults (written atomically, one saved when a run raises) and resume exactly.

``ExceptionCheckpoint``: Lightning's own ``OnExceptionCheckpoint`` also makes ``fit(ckpt_path=None)`` resume
silently from ``last.ckpt`` when one exists in the folder; a fresh run must never do that, so the lab uses
this instead.

``AtomicCheckpointIO``: Lightning's ``TorchCheckpointIO`` stages a checkpoint in the system temp folder and
moves it into place; across file systems the move is a copy, so a full disk or a SIGKILL mid-copy leaves a
truncated ``.ckpt`` that looks like a checkpoint. Here the file is written next to its target and renamed
(``os.replace``, atomic on one file system): a checkpoint file is whole or absent.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to memory, write ``<name>.partial`` beside the target, fsync, rename; a failed write leaves
    nothing (a full disk is an ``OSError`` naming the file and the fix)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        data = io.BytesIO()
        torch.save(checkpoint, data)  # serialised first: a write error is then an OSError, not a zip error
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with partial.open("wb") as f:
                f.write(data.getbuffer())
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, target)
        except BaseException as err:
            partial.unlink(missing_ok=True)
            if not isinstance(err, OSError):
                raise
            raise OSError(
                err.errno,
                f"cannot write the checkpoint {target} ({err.strerror}); free space there or set "
                "output_dir=<another folder>, then resume from the last checkpoint that was written",
            ) from err


class ExceptionCheckpoint(L.Callback):
    """On an exception inside ``fit``, write ``<dirpath>/on_exception.ckpt`` (weights before the failing step).

    If that write fails too (the disk that broke the run is full), a warning says so and the run's own
    error is the one reported.
    """

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "on_exception.ckpt"

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        try:
            trainer.save_checkpoint(self.path)
        except OSError as err:
            log.warning("no on_exception checkpoint: %s", err)
