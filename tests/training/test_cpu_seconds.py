"""``training.cpu_time.cpu_seconds``, a run's ``cpu_s``: the CPU time of the run's process and of the children
it has waited for (TextWorld's game generation runs in child processes), from the start of ``train``, so
building the envs is in it; carried over a resume by ``training.run_cost.RunCost``. ``study plan`` prices runs
by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train
from gigpo_lab.training.cpu_time import cpu_seconds
from tests.training.costly_env import BURN

REPO = Path(__file__).resolve().parents[2]


def _fresh(program: str, *args: str) -> list[float]:
    """Run ``program`` in a fresh interpreter and return the numbers its last line prints. CPU time is measured
    there, not in the test worker: there ``subprocess`` reaps children that earlier tests left unwaited (an
    MLflow server, a JVM, a loky worker) whenever a child starts, and their CPU time would land in the window
    (CI once read 16 s for 0.5)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", program, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return [float(x) for x in done.stdout.splitlines()[-1].split()]


def test_a_waited_childs_cpu_time_is_counted_and_its_sleep_is_not():
    program = (
        "import subprocess, sys\nfrom gigpo_lab.training.cpu_time import cpu_seconds\nbefore = cpu_seconds()\n"
        f"subprocess.run([sys.executable, '-c', {('import time; time.sleep(1.0)' + chr(10) + BURN)!r}, '0.5'],"
        " check=True)\nprint(cpu_seconds() - before)\n"
    )
    (spent,) = _fresh(program)
    assert 0.48 <= spent < 1.0, spent  # the child's 0.5 s of CPU (in 10 ms ticks), not its 1.5 s of wall


def test_this_processs_own_cpu_time_is_counted_and_a_sleep_is_not():
    program = (
        "import time\nfrom gigpo_lab.training.cpu_time import cpu_seconds\nbefore = cpu_seconds()\n"
        "time.sleep(1.0)\nasleep = cpu_seconds() - before\n"
        + BURN.replace("float(sys.argv[1])", "0.3")  # the same busy loop, in this process
        + "print(asleep, cpu_seconds() - before)\n"
    )
    asleep, total = _fresh(program)
    assert asleep < 0.1 and total >= 0.28, (asleep, total)  # os.times counts in 10 ms ticks


#: Three tiny runs alike in one process but for the child that the third one's env waits for.
_RUNS = """
import json, sys
import tests.training.costly_env as costly
from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train

overrides, root = json.loads(sys.argv[1]), sys.argv[2]

def run(child_cpu_s, name):
    costly._burned = False
    cfg = compose_config([
        *overrides, f"output_dir={root}/{name}", "env._target_=tests.training.costly_env.make_costly_env",
        f"+env.child_cpu_s={child_cpu_s}",
    ])
    return train(cfg)["time/cpu_s"]

run(0.0, "warm")
print(run(0.0, "plain"), run(3.0, "costly"))
"""


@pytest.mark.slow  # 19 s (three runs in a fresh interpreter); a waited child's CPU stays in the default suite above
def test_a_runs_cpu_s_includes_building_its_envs(tiny_overrides, tmp_path):
    """Two tiny runs alike but for a child that burns 3 CPU-seconds when the first env is built (as game
    generation does, before ``fit``): the second run's ``cpu_s`` is about 3 s more. A first run warms the
    process (its imports cost CPU once)."""
    overrides = [o for o in tiny_overrides if not o.startswith("output_dir=")]
    plain, costly = _fresh(_RUNS, json.dumps(overrides), str(tmp_path))
    assert costly - plain > 2.0, (plain, costly)


def test_a_resumed_runs_cost_counts_the_process_before_it(tiny_overrides, tmp_path):
    """A run extended from a finished run's ``last.ckpt``: its ``cpu_s`` and ``wall_s`` are the checkpoint's
    recorded cost (the first process's, up to that checkpoint) plus what the second process spent, not the
    second process's alone."""
    import torch

    overrides = [o for o in tiny_overrides if not o.startswith("output_dir=")] + [
        f"output_dir={tmp_path / 'r'}"
    ]
    first = train(compose_config([*overrides, "trainer.iterations=2"]))
    ckpt = tmp_path / "r" / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["callbacks"]["RunCost"]
    # written just before the run's end: a little less than the first run's reported cost
    assert 0 < saved["cpu_s"] <= first["time/cpu_s"] and 0 < saved["wall_s"] <= first["time/wall_s"], saved

    before, wall_before = cpu_seconds(), time.perf_counter()
    second = train(compose_config([*overrides, "trainer.iterations=4", f"ckpt_path={ckpt}"]))
    own, own_wall = cpu_seconds() - before, time.perf_counter() - wall_before
    assert saved["cpu_s"] < second["time/cpu_s"] <= saved["cpu_s"] + own, (saved, second["time/cpu_s"], own)
    assert second["time/cpu_s"] - saved["cpu_s"] > 0.5 * own  # the second process's work is in it too
    assert saved["wall_s"] < second["time/wall_s"] <= saved["wall_s"] + own_wall
    # the second process's fit is in it too (wall_s starts just before fit; own_wall also holds the setup)
    assert second["time/wall_s"] - saved["wall_s"] > 0.2 * own_wall
