"""``train.cpu_seconds``, a run's ``cpu_s``: the CPU time of the run's process and of the children it has waited
for (TextWorld's game generation runs in child processes), which ``study plan`` prices runs by."""

from __future__ import annotations

import subprocess
import sys

from gigpo_lab.train import cpu_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_a_waited_childs_cpu_time_is_counted():
    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", BURN.format(s=0.5)], check=True)
    assert cpu_seconds() - before >= 0.5  # the child burned at least 0.5 s of its own CPU time, then ended


def test_this_processs_own_cpu_time_is_counted():
    before = cpu_seconds()
    exec(BURN.format(s=0.3), {})  # noqa: S102 - the same busy loop, in this process
    assert cpu_seconds() - before >= 0.3
