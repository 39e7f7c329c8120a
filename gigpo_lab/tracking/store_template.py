"""A new sqlite MLflow store, copied from an empty one that MLflow has already migrated.

MLflow creates a sqlite store by building its tables and then running every Alembic migration: 1-2 s of CPU,
and seconds more of disk syncs on a busy machine (experiments/bench/cli_speed.md, "A run's fixed cost"). The
lab instead keeps one empty store per MLflow version in its cache folder (``$GIGPO_LAB_CACHE``, else
``~/.cache/gigpo_lab``). MLflow itself creates and migrates that template once, and the lab then removes its
Default experiment. A new store is a copy of it. When MLflow opens the copy, it finds its tables at the head
revision and writes the Default experiment itself, as it does for any store that lacks one, with this store's
artifact location and time. The result is the store MLflow would have made (tests/tracking/test_store_template.py
compares the two, table by table).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from gigpo_lab.cache_root import cache_root


def template_path() -> Path:
    """The cached empty store of the installed MLflow version."""
    from importlib.metadata import version

    return cache_root() / f"mlflow-{version('mlflow')}-empty.db"


def _build_template(path: Path) -> None:
    """Have MLflow create and migrate a store in a temporary file, remove its Default experiment, and move it
    to ``path`` (atomically: a concurrent builder's copy is as good)."""
    from mlflow.tracking import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        db = Path(tmp) / "store.db"
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            conn.execute("DELETE FROM experiments WHERE experiment_id = 0")
        conn.close()
        os.replace(db, path)


def seed_store(path: Path) -> bool:
    """Create the sqlite store ``path``, which does not exist yet, as a copy of the template (built on first
    use). Returns False, having written nothing at ``path``, where the template cannot be built or read or the
    copy cannot be placed; MLflow then creates the store itself, as it would have anyway. A store that appears
    at ``path`` meanwhile (another process) is kept."""
    template = template_path()
    try:
        if not template.is_file():
            _build_template(template)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except Exception:  # a cache that cannot be written or read costs only the speed-up
        return False
    try:
        os.close(fd)
        shutil.copyfile(template, tmp)
        os.link(tmp, path)  # fails if the store exists by now: never overwrite one
        return True
    except OSError:
        return False
    finally:
        os.unlink(tmp)
