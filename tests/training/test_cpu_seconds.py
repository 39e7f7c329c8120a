"""``training.cpu_time.cpu_seconds``, a run's ``cpu_s``: the CPU time of the run's process and of the children
it has waited for (TextWorld's game generation runs in child processes), from the start of ``train``, so
building the envs is in it; carried over a resume by ``training.run_cost.RunCost``. ``study plan`` prices runs
by it."""

from __future__ import annotations

import subprocess
import sys
import time

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train
from gigpo_lab.training.cpu_time import cpu_seconds
from tests.training.costly_env import BURN


def test_a_waited_childs_cpu_time_is_counted_and_its_sleep_is_not():
    """Measured in a fresh interpreter: in the test worker, ``subprocess`` reaps children that earlier tests left
    unwaited (an MLflow server, a JVM) when it starts the next one, and their CPU time would land in this window
    (CI once read 16 s)."""
    program = (
        "import subprocess, sys\nfrom gigpo_lab.training.cpu_time import cpu_seconds\nbefore = cpu_seconds()\n"
        f"subprocess.run([sys.executable, '-c', {('import time; time.sleep(1.0)' + chr(10) + BURN)!r}, '0.5'],"
        " check=True)\nprint(cpu_seconds() - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, text=True).stdout
    spent = float(out.split()[-1])
    assert 0.48 <= spent < 1.0, spent  # the child's 0.5 s of CPU (in 10 ms ticks), not its 1.5 s of wall


def test_this_processs_own_cpu_time_is_counted_and_a_sleep_is_not():
    before = cpu_seconds()
    time.sleep(1.0)
    asleep = cpu_seconds() - before  # other threads of the test process may run meanwhile: well under 1 s
    exec(BURN.replace("float(sys.argv[1])", "0.3"), {})  # noqa: S102 - the same busy loop, in this process
    assert asleep < 0.5 and cpu_seconds() - before >= 0.28, asleep  # os.times counts in 10 ms ticks


def test_a_runs_cpu_s_includes_building_its_envs(tiny_overrides, tmp_path):
    """Two tiny runs alike but for a child that burns 3 CPU-seconds when the first env is built (as game
    generation does, before ``fit``): the second run's ``cpu_s`` is about 3 s more. A first run warms the
    process (its imports cost CPU once)."""

    def run(child_cpu_s: float, name: str) -> float:
        import tests.training.costly_env as costly

        costly._burned = False
        overrides = [o for o in tiny_overrides if not o.startswith("output_dir=")]
        cfg = compose_config([
            *overrides, f"output_dir={tmp_path / name}", "env._target_=tests.training.costly_env.make_costly_env",
            f"+env.child_cpu_s={child_cpu_s}",
        ])  # fmt: skip
        return train(cfg)["time/cpu_s"]

    run(0.0, "warm")
    plain, costly = run(0.0, "plain"), run(3.0, "costly")
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
    # the second process's fit, most of its wall time, is in it too
    assert second["time/wall_s"] - saved["wall_s"] > 0.5 * own_wall
