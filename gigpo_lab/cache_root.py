"""The lab's cache folder: ``$GIGPO_LAB_CACHE``, else ``~/.cache/gigpo_lab`` (converted models, the empty MLflow
store)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$GIGPO_LAB_CACHE`` when set, else ``~/.cache/gigpo_lab``; not created here."""
    return Path(os.environ.get("GIGPO_LAB_CACHE") or Path.home() / ".cache" / "gigpo_lab").expanduser()
