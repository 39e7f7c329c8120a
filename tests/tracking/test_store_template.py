"""gigpo_lab/tracking/store_template.py: a store copied from the template is the store MLflow makes itself, on
real sqlite stores opened by a real MlflowClient; a failure to use the cache writes nothing and MLflow
creates the store as before; an existing store is never replaced."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gigpo_lab.tracking.mlflow_tracker import MlflowTracker
from gigpo_lab.tracking.store_template import seed_store, template_path

#: columns that hold a time, different in any two stores
TIMES = {"creation_time", "last_update_time", "start_time", "end_time", "timestamp"}


def schema(sql: str) -> list[str]:
    """A CREATE TABLE statement's lines, sorted: MLflow's own migrations write a table's constraints in an
    order that varies from one new store to the next (seen: 2 orders of the runs table's CHECK constraints
    among 4 stores made in one process), which sqlite does not care about."""
    return sorted(line.strip().rstrip(",").strip() for line in sql.splitlines())


def dump(db: Path, run_id: str = "") -> dict[str, object]:
    """Every table's schema and rows (time columns left out, ``run_id`` written ``<run>``: run ids are
    random), sqlite's own autoincrement counters among them, and the indexes."""

    def same(value):
        return value.replace(run_id, "<run>") if run_id and isinstance(value, str) else value

    with sqlite3.connect(db) as conn:
        out = {}
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ):
            cursor = conn.execute(f'SELECT * FROM "{name}"')
            columns = [c[0] for c in cursor.description]
            keep = [i for i, c in enumerate(columns) if c not in TIMES]
            rows = sorted(tuple(same(row[i]) for i in keep) for row in cursor)
            out[name] = (schema(sql), [columns[i] for i in keep], rows)
        out["indexes"] = sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    conn.close()
    return out


def use(db: Path) -> str:
    """What a run does to a new store: open it, create an experiment, log a run; returns the run's id."""
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("gigpo-lab")
    run = client.create_run(exp, run_name="r")
    client.log_metric(run.info.run_id, "m", 1.0, step=0)
    return run.info.run_id


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)  # both stores' Default experiment puts its artifacts under ./mlruns
    fresh, seeded = tmp_path / "fresh.db", tmp_path / "seeded.db"
    MlflowClient(tracking_uri=f"sqlite:///{fresh}").search_experiments(max_results=1)
    assert seed_store(seeded) and template_path().is_file() and template_path().parent == cache
    template = dump(template_path())
    assert template["experiments"][2] == []  # the template has no Default experiment: MLflow writes it
    MlflowClient(tracking_uri=f"sqlite:///{seeded}").search_experiments(max_results=1)
    assert dump(seeded) == dump(fresh)
    default = MlflowClient(tracking_uri=f"sqlite:///{seeded}").get_experiment("0")
    assert default.name == "Default" and default.artifact_location == str(tmp_path / "mlruns" / "0")
    # then a run in each: the same experiment ids (the autoincrement counter too), runs, tags and metrics
    assert dump(fresh, use(fresh)) == dump(seeded, use(seeded))


def test_the_tracker_seeds_a_new_store_and_opens_an_existing_one_as_it_is(tmp_path, cache):
    db = tmp_path / "mlflow.db"
    tracker = MlflowTracker(f"sqlite:///{db}", "gigpo-lab", run_name="r")
    tracker.check_reachable()
    assert template_path().is_file() and db.is_file()
    run_id = tracker.start()
    before = dump(db)
    again = MlflowTracker(f"sqlite:///{db}", "gigpo-lab", run_id=run_id)
    again.check_reachable()  # an existing store: not replaced by the template
    assert dump(db) == before and again.client.get_run(run_id).info.run_name == "r"


def test_a_cache_that_cannot_be_written_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(blocker))  # a file where the cache folder should be
    db = tmp_path / "mlflow.db"
    assert seed_store(db) is False and not db.exists()
    assert os.listdir(tmp_path) == ["not-a-folder"]  # no temporary file left behind
    tracker = MlflowTracker(f"sqlite:///{db}", "gigpo-lab", run_name="r")
    tracker.check_reachable()
    assert tracker.client.get_experiment("0").name == "Default"  # created by MLflow, migrations and all


def test_a_store_that_appears_meanwhile_is_kept(tmp_path, cache):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"another process's store")
    assert seed_store(db) is False
    assert db.read_bytes() == b"another process's store"
    assert sorted(os.listdir(tmp_path)) == ["cache", "mlflow.db"]
