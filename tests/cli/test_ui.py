"""``gigpo-lab ui`` as a real process on a real sweep's store: /health, the REST API, loopback binding, the
printed link to the sweep's saved view in model-training mode, and a clean exit 0 on SIGINT that frees the port
and leaves no server behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gigpo_lab.cli.ui import is_loopback
from tests.analysis.test_compare import BIN, _env, shared_sweep

#: `mlflow ui --workers 1` needs about 16 s on an idle 2-core machine; a loaded CI machine beside the other test
#: worker may take many times that (the command's own ``--timeout`` is raised to match)
START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listeners(port: int) -> set[str]:
    """Local addresses in LISTEN state on ``port``, from /proc/net/tcp (IPv4 decoded) and tcp6 (raw hex)."""
    found = set()
    for name in ("tcp", "tcp6"):
        table = Path("/proc/net") / name
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if name == "tcp" else addr)
    return found


def _wait_for(pattern: str, path: Path, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, path.read_text())
        if match:
            return match
        assert proc.poll() is None, f"gigpo-lab ui exited with {proc.returncode}"
        time.sleep(0.25)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout} s")


def _api(url: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc/net/tcp")
def test_ui_serves_the_sweep_on_loopback_and_stops_cleanly_on_sigint(tmp_path, tmp_path_factory):
    sweep = shared_sweep(tmp_path_factory, "estimators")
    port = _free_port()
    out, err = tmp_path / "ui.out", tmp_path / "ui.err"
    cmd = [
        str(BIN / "gigpo-lab"),
        "ui",
        "--port",
        str(port),
        "--store",
        sweep.uri,
        "--timeout",
        str(START_TIMEOUT_S),
    ]
    with out.open("w") as out_f, err.open("w") as err_f:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=out_f, stderr=err_f)
    server_pid = None
    try:
        url = _wait_for(r"MLflow UI: (\S+)", out, proc, START_TIMEOUT_S).group(1)
        server_pid = int(_wait_for(r"\(pid (\d+)\)", err, proc, 5).group(1))
        assert url == f"http://127.0.0.1:{port}"  # loopback by default
        assert _listeners(port) == {"127.0.0.1"}
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            assert resp.status == 200
        exp = _api(url, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={sweep.experiment}")
        found = _api(
            url, "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment"]["experiment_id"]]}
        )
        by_api = {
            r["info"]["run_id"]: {t["key"]: t["value"] for t in r["data"]["tags"]} for r in found["runs"]
        }
        client = MlflowClient(tracking_uri=sweep.uri)
        direct = client.search_runs([exp["experiment"]["experiment_id"]])
        assert set(by_api) == {r.info.run_id for r in direct} and len(by_api) == 5  # parent + 4 jobs
        children = [tags for tags in by_api.values() if tags.get("mlflow.parentRunId") == sweep.parent_run_id]
        assert sorted((t["estimator"], t["seed"]) for t in children) == [
            ("gigpo", "0"),
            ("gigpo", "1"),
            ("grpo", "0"),
            ("grpo", "1"),
        ]
        assert by_api[sweep.parent_run_id]["gigpo_lab.role"] == "sweep-parent"
        # the sweep's link: model-training mode and the saved view the sweep wrote on its experiment
        exp_id = exp["experiment"]["experiment_id"]
        link = _wait_for(r"newest sweep: (\S+)", out, proc, 30).group(1)
        assert link == (
            f"{url}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={sweep.sweep_id}"
        )
        exp_tags = {t["key"]: t["value"] for t in exp["experiment"]["tags"]}
        assert exp_tags["mlflow.experimentKind"] == "custom_model_development"
        envelope = json.loads(exp_tags[f"mlflow.sharedViewState.{sweep.sweep_id}"])
        assert envelope["name"].startswith("sweep ") and isinstance(envelope["createdAt"], int)
        view = json.loads(envelope["state"])
        assert view["selectedColumns"][:4] == [
            "params.`estimator.step_advantage_weight`",
            "tags.`estimator`",
            "tags.`seed`",
            "metrics.`eval/success_rate`",
        ]
        # the view's filter selects exactly this sweep's runs, and its columns name values those runs hold
        chosen = _api(
            url,
            "/api/2.0/mlflow/runs/search",
            {"experiment_ids": [exp_id], "filter": view["searchFilter"]},
        )["runs"]
        assert {r["info"]["run_id"] for r in chosen} == set(by_api)
        kids = [r for r in chosen if r["info"]["run_id"] != sweep.parent_run_id]
        assert all(any(m["key"] == "eval/success_rate" for m in r["data"]["metrics"]) for r in kids)
        assert any(
            p["key"] == "estimator.step_advantage_weight" for r in kids for p in r["data"].get("params", [])
        )
        # the URL and little else: no access log line per request, no INFO lines, no Starlette warning
        said = err.read_text()
        for noise in ('"GET ', "INFO", "StarletteDeprecationWarning", "Registry store URI"):
            assert noise not in said, said
        assert len(said.splitlines()) <= 3, said

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert _listeners(port) == set()
        with socket.socket() as sock:  # the port can be bound again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        with pytest.raises(ProcessLookupError):  # the server was stopped and reaped, not orphaned
            os.kill(server_pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None:
            try:
                os.killpg(server_pid, signal.SIGKILL)  # the server's own process group, left only on failure
            except ProcessLookupError:
                pass


def test_port_in_use_and_non_loopback_host_are_reported(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [str(BIN / "gigpo-lab"), "ui", "--port", str(port), "--store", str(tmp_path / "m.db")]
        out = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 1 and f"port {port} on 127.0.0.1 is in use" in out.stderr
        wide = subprocess.run(
            [*cmd, "--host", "0.0.0.0"], cwd=tmp_path, env=_env(), capture_output=True, text=True
        )
        assert wide.returncode == 1 and "warning: binding the MLflow UI to 0.0.0.0" in wide.stderr
    assert not (tmp_path / "m.db").exists()  # nothing started, nothing created


@pytest.mark.parametrize(
    "host,loopback",
    [("127.0.0.1", True), ("127.0.1.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False)]
    + [("::", False), ("192.168.1.5", False), ("example.org", False)],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback
