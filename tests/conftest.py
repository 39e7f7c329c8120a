"""Shared fixtures: small composed configs, each run in its own tmp_path with its own sqlite MLflow store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import property_examples  # noqa: E402
from hypothesis import settings  # noqa: E402
from tiny_sizes import TINY  # noqa: E402 - re-exported for the tests

# no per-example deadline anywhere: on a loaded 2-core CI machine a microsecond body can pass 200 ms (a test that
# sets its own settings keeps them)
settings.register_profile("lab", deadline=None)
settings.load_profile("lab")

#: Set by `make test-vllm` (in .venv-vllm): there vllm must import and a `vllm`-marked test that skips fails, so
#: that a broken install or a missing wheel cannot pass as a run of skips.
VLLM_VENV = os.environ.get("GIGPO_LAB_VLLM_VENV") == "1"


def pytest_addoption(parser):
    parser.addoption(
        "--thorough",
        action="store_true",
        help="property tests draw their thorough count of examples, derandomized (tests/property_examples.py)",
    )


def pytest_configure(config):
    property_examples.THOROUGH = config.getoption("--thorough")


def pytest_sessionstart(session):
    if VLLM_VENV:
        try:
            import vllm  # noqa: F401
        except ImportError as error:
            raise pytest.UsageError(f"GIGPO_LAB_VLLM_VENV=1 but vllm does not import: {error!r}") from error


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if VLLM_VENV and report.skipped and item.get_closest_marker("vllm") and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a vllm test skipped inside the vLLM venv (GIGPO_LAB_VLLM_VENV=1): {reason}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Lightning's ``ddp_spawn`` leaves ``MASTER_PORT`` set in the process that spawned the ranks; a later test
    in the same worker (or a child run copying the environment) would reuse a port found free minutes before,
    which something else may hold by then. Each test starts without it, before its fixtures, so a free one is
    found again."""
    os.environ.pop("MASTER_PORT", None)


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """An empty sqlite MLflow store made once per session (MLflow's schema migrations take 3-8 s a store)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("empty_store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments(max_results=1)
    return path


@pytest.fixture
def tiny_overrides(tmp_path, empty_mlflow_store):
    """TINY plus a private output dir and sqlite store under tmp_path (a copy of the session's empty store)."""
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    return [*TINY, f"output_dir={tmp_path / 'out'}", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"]
