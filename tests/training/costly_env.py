"""An env whose first construction in a process runs a child process that burns CPU, as TextWorld's game
generation does: what ``tests/training/test_cpu_seconds.py`` checks a run's ``cpu_s`` counts.

Its own module, importing only the package, so a run loads it by name (``env._target_=...``)."""

from __future__ import annotations

import subprocess
import sys

from gigpo_lab.envs import make_env

#: The child's program: burn ``argv[1]`` seconds of its own CPU time, then end.
BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < float(sys.argv[1]): pass\n"
_burned = False


def make_costly_env(child_cpu_s: float = 0.0, **kwargs):
    """``make_env(**kwargs)``; the first call in a process first waits for a child that burns ``child_cpu_s``."""
    global _burned
    if not _burned and child_cpu_s > 0:
        subprocess.run([sys.executable, "-c", BURN, str(child_cpu_s)], check=True)
        _burned = True
    return make_env(**kwargs)
