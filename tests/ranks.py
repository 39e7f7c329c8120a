"""Start the ranks of a multi-process ``gigpo-lab train`` job here, each as its own process, with the variables a
launcher (srun, torchrun) sets: every rank starts at once, and each is a child of this process (so ``os.wait4``
gives its own peak memory). Used by tests/training/test_ddp.py and experiments/bench/bench_fsdp_memory.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(
    overrides: list[str],
    cwd: Path,
    world: int = 2,
    streams: Callable[[int], dict] = lambda rank: {},
) -> list[subprocess.Popen]:
    """``python -m gigpo_lab.cli train <overrides>`` once per rank 0..world-1 on one node (``LOCAL_RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``), one OpenMP thread each; ``streams(rank)`` gives that
    rank's ``Popen`` output arguments (``stdout=``, ``stderr=``, ``text=``)."""
    port = str(free_port())
    cmd = [sys.executable, "-m", "gigpo_lab.cli", "train", *overrides]
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "LOCAL_RANK": str(rank),
            "NODE_RANK": "0",
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT),
        }
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, **streams(rank)))
    return procs
