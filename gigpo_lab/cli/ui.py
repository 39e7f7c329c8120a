"""``gigpo-lab ui``: the MLflow UI on the lab's store, as a child process that stops cleanly on Ctrl-C.

Runs ``python -m mlflow ui --backend-store-uri <store> --host <host> --port <port> --workers 1`` in its own
process group, waits until ``/health`` answers (about 16 s on a 2-core machine), prints the URL, and on
SIGINT or SIGTERM terminates the whole group (the server and its workers), waits for it and exits 0.
Loopback (127.0.0.1) is the default; any other host is allowed, with a warning, because MLflow has no
authentication here. Imports neither torch nor lightning nor mlflow: it only starts a process.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

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
    if store.startswith("sqlite:///") and not Path(store[len("sqlite:///") :]).is_file():
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
