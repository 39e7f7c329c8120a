"""``gigpo-lab ui``: the MLflow UI on the lab's store, as a child process that stops cleanly on Ctrl-C.

Runs ``python -m mlflow ui --backend-store-uri <store> --host <host> --port <port> --workers 1`` in its own
process group, waits until ``/health`` answers (about 16 s on a 2-core machine), prints the URL, and on
SIGINT or SIGTERM terminates the whole group (the server and its workers), waits for it and exits 0.
Loopback (127.0.0.1) is the default; any other host is allowed, with a warning, because MLflow has no
authentication here. Imports neither torch nor lightning nor mlflow: it only starts a process.

It also prints a URL that opens the newest sweep in model-training mode. What MLflow 3.17.2's UI reads
(``mlflow/server/js/src``; the same strings are in the installed ``mlflow/server/js/build/static/js``):

- The mode (GenAI or model training) is the *workflow type*, ``common/contexts/WorkflowTypeContext.tsx``: the
  URL's ``workflowType`` query parameter (``genai`` or ``machine_learning``), else the browser's localStorage key
  ``mlflow.workflowType``, else ``DEFAULT_WORKFLOW_TYPE = WorkflowType.GENAI``. Only a click on the sidebar's
  GenAI / Model training switch writes the localStorage key. The experiment tag ``mlflow.experimentKind`` does
  not decide it: ``useExperimentKind`` (``experiment-tracking/utils/ExperimentKindUtils.ts``) derives the kind
  from the workflow type because ``shouldEnableWorkflowBasedNavigation()`` (``common/utils/FeatureUtils.ts``)
  returns true. So a server cannot make model training the default of a browser that never chose it; a URL
  with ``workflowType=machine_learning`` opens that one page in that mode, and the app's own links drop it.
- The runs table's columns, sort and filter come from the browser's localStorage unless the URL names a saved
  view, ``?viewStateShareKey=<id>``: an experiment tag ``mlflow.sharedViewState.<id>`` holding
  ``{"name", "createdAt", "updatedAt", "state"}`` (``experiment-page/hooks/useSharedExperimentViewState.ts``,
  ``useSavedViews.ts``). Each lab sweep writes one (``gigpo_lab.tracking.sweep``).
- A run page's charts are grouped by metric prefix in alphabetical order (``adv/`` first), and their layout
  lives only in the browser's localStorage (``run-page/RunViewMetricCharts.tsx``): nothing a server can set.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from gigpo_lab.tracking.mlflow_tracker import VIEW_TAG_PREFIX, sqlite_file

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class _Stop(Exception):
    """Raised from the signal handler to leave the wait."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def port_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound now (something listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


#: The query that opens a page in model-training mode (``WorkflowType.MACHINE_LEARNING``).
MODEL_TRAINING_QUERY = "workflowType=machine_learning"


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def sweep_url(url: str) -> str | None:
    """The page of the newest sweep in the store served at ``url``, in model-training mode: its saved view
    (the sweep's runs with ω, estimator, seed and eval success as columns) when the sweep wrote one, else the
    runs table filtered to the sweep. None when the store holds no sweep. Asks the server's REST API."""
    experiments = _post(url, "/api/2.0/mlflow/experiments/search", {"max_results": 1000}).get(
        "experiments", []
    )
    if not experiments:
        return None
    found = _post(
        url,
        "/api/2.0/mlflow/runs/search",
        {
            "experiment_ids": [e["experiment_id"] for e in experiments],
            "filter": "tags.`gigpo_lab.role` = 'sweep-parent'",
            "order_by": ["attributes.start_time DESC"],
            "max_results": 1,
        },
    ).get("runs", [])
    if not found:
        return None
    run = found[0]
    exp_id = run["info"]["experiment_id"]
    sweep_id = next((t["value"] for t in run["data"].get("tags", []) if t["key"] == "sweep_id"), None)
    if sweep_id is None:
        return None
    exp = next(e for e in experiments if e["experiment_id"] == exp_id)
    has_view = any(t["key"] == VIEW_TAG_PREFIX + sweep_id for t in exp.get("tags", []))
    query = {"viewStateShareKey": sweep_id} if has_view else {"searchFilter": f"tags.sweep_id = '{sweep_id}'"}
    return f"{url}/#/experiments/{exp_id}/runs?{MODEL_TRAINING_QUERY}&{urllib.parse.urlencode(query)}"


def _stop_child(child: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the child's process group (server and workers), then SIGKILL it if it outlives ``grace_s``."""
    if child.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


#: uvicorn's own flags: no access log (a line per HTTP request) and no start-up INFO lines.
QUIET_UVICORN = "--no-access-log --log-level warning"
#: Python's -W filter for the one warning every start printed: MLflow 3.17 imports Starlette's deprecated
#: WSGI middleware (nothing the user can act on).
QUIET_WARNINGS = "ignore:starlette.middleware.wsgi is deprecated"


def _child_env() -> dict[str, str]:
    """The server's environment: MLflow's job runner (LLM-judge and trace jobs, seven huey worker
    processes that also slow the shutdown) is off unless the user set ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION``;
    MLflow's INFO lines and the Starlette deprecation warning are silenced unless the user set their own."""
    env = dict(os.environ)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    env.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), QUIET_WARNINGS) if w)
    return env


def _err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(message, highlight=False)


def main(argv: list[str] | None = None) -> int:
    """``gigpo-lab ui [--store URI] [--host 127.0.0.1] [--port 5000] [--timeout 120]``."""
    from gigpo_lab.analysis.runs import store_uri

    parser = argparse.ArgumentParser(
        prog="gigpo-lab ui", description="Start the MLflow UI on the lab's store."
    )
    parser.add_argument("--store", help="tracking URI or sqlite file (default: sqlite:///<cwd>/mlflow.db)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1, local only)"
    )
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for /health (default 120)"
    )
    args = parser.parse_args(argv)
    store = store_uri(args.store)
    if (path := sqlite_file(store)) is not None and not path.is_file():
        _err(f"[yellow]gigpo-lab ui:[/yellow] no store at {store} yet; MLflow will create an empty one")
    if not is_loopback(args.host):
        _err(
            f"[bold yellow]warning:[/bold yellow] binding the MLflow UI to {args.host}: anyone who can reach "
            "this machine on that interface can read and change every run (MLflow has no login here)"
        )
    if port_in_use(args.host, args.port):
        _err(f"[red]gigpo-lab ui:[/red] port {args.port} on {args.host} is in use; pass --port <a free port>")
        return 1
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store, "--registry-store-uri", store]
    cmd += ["--host", args.host, "--port", str(args.port), "--workers", "1", "--uvicorn-opts", QUIET_UVICORN]

    def _on_signal(signum, frame):
        raise _Stop(signal.Signals(signum).name)

    probe = _url(_WILDCARDS.get(args.host, args.host), args.port)
    child = None
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # own process group: Ctrl-C reaches only us, and we stop the whole group; the child's stdout goes to
        # our stderr so that our stdout carries only the URL line
        child = subprocess.Popen(cmd, start_new_session=True, stdout=sys.stderr, env=_child_env())
        _err(f"gigpo-lab ui: starting MLflow on {store} (pid {child.pid}) …")
        deadline = time.monotonic() + args.timeout
        while not _healthy(probe):
            if child.poll() is not None:
                _err(
                    f"[red]gigpo-lab ui:[/red] mlflow ui exited with code {child.returncode} before answering"
                )
                return child.returncode or 1
            if time.monotonic() > deadline:
                _err(f"[red]gigpo-lab ui:[/red] no answer from {probe}/health after {args.timeout:.0f} s")
                return 1
            time.sleep(0.5)
        sys.stdout.write(f"MLflow UI: {_url(args.host, args.port)}  (store {store}; Ctrl-C to stop)\n")
        try:
            newest = sweep_url(probe)
        except (urllib.error.URLError, OSError, ValueError, KeyError, StopIteration):
            newest = None  # the link is a convenience: the UI is up whatever the store holds
        if newest is not None:
            newest = newest.replace(probe, _url(args.host, args.port), 1)
            sys.stdout.write(
                f"newest sweep: {newest}\n  (model-training mode for this link; to keep it, click "
                '"Model training" in the sidebar once: MLflow remembers it per browser and port)\n'
            )
        sys.stdout.flush()
        return child.wait() or 0
    except (_Stop, KeyboardInterrupt):
        return 0
    finally:
        for sig in previous:  # a second Ctrl-C must not interrupt the shutdown
            signal.signal(sig, signal.SIG_IGN)
        if child is not None:
            _stop_child(child)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
