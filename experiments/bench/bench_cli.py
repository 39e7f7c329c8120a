"""How long the commands a person waits on take, as whole processes, two source trees side by side.

Each command runs as ``python -m gigpo_lab.cli ...`` with ``PYTHONPATH`` set to one tree, from an empty
working directory, in turn (old, new, old, new ...) so that a machine whose speed drifts moves both alike; the
ratio new/old is taken pair by pair and its median printed, with the median wall and CPU (user + system)
seconds of each tree. Quote the ratios on a loaded machine: the absolute seconds grow with the load, the
ratios much less.

Usage (from the repo root; the old tree is a clean worktree of the commit to compare with)::

    git worktree add /tmp/cli_old 2c91c5c
    python experiments/bench/bench_cli.py --old /tmp/cli_old --new . --runs 5
    git worktree remove /tmp/cli_old
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: name -> arguments of ``gigpo-lab``; the five commands of issue #46, item 1, and a value ``train``'s own checks
#: refuse (after composing).
COMMANDS: dict[str, list[str]] = {
    "gigpo-lab --help": ["--help"],
    "train --help": ["train", "--help"],
    "train ... --cfg job": ["train", "estimator=grpo", "env=sokoban", "seed=3", "--cfg", "job"],
    "train estimator=nope": ["train", "estimator=nope"],
    "train rollout.group_size=1": ["train", "rollout.group_size=1"],
    "docs --out FILE": ["docs", "--out", "CONFIG.md"],
}


def run_once(tree: Path, args: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, user + system s, exit status) of one whole process."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gigpo_lab.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the tree to compare with (PYTHONPATH)")
    parser.add_argument("--new", type=Path, default=Path("."), help="the tree measured (default: here)")
    parser.add_argument("--runs", type=int, default=5, help="pairs per command, after one warm-up pair")
    parser.add_argument("--only", nargs="*", help="names of COMMANDS to run (default: all)")
    args = parser.parse_args()
    print(
        f"{'command':<26} {'old wall':>9} {'new wall':>9} {'old cpu':>8} {'new cpu':>8} {'new/old':>8}  exit"
    )
    for name, argv in COMMANDS.items():
        if args.only and name not in args.only:
            continue
        old, new = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs + 1):
                pair = run_once(args.old, argv, Path(tmp)), run_once(args.new, argv, Path(tmp))
                if i:  # the first pair warms the file cache
                    old.append(pair[0])
                    new.append(pair[1])
        ratio = statistics.median(n[0] / o[0] for o, n in zip(old, new, strict=True))
        med = [statistics.median(r[k] for r in runs) for runs in (old, new) for k in (0, 1)]
        print(
            f"{name:<26} {med[0]:>8.2f}s {med[2]:>8.2f}s {med[1]:>7.2f}s {med[3]:>7.2f}s {ratio:>8.2f}"
            f"  {old[0][2]}/{new[0][2]}"
        )


if __name__ == "__main__":
    main()
