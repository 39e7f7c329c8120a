"""The JVMs under TextWorldExpress and ScienceWorld envs (gigpo_lab/envs/jvm.py), with real processes.

One JVM per jar and process, however many envs; closed with the last env; a crashed JVM is one line naming the
game and the seed; no JVM outlives a run killed with SIGTERM or SIGKILL; a script with no main guard and
AsyncVectorEnv work; without Java the error is one line naming the fix.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from java_benchmarks import TWX, needs_java, needs_twx, twx_kwargs

from gigpo_lab.envs import jvm, make_env

pytestmark = [needs_twx]


def alive(pid: int) -> bool:
    """A live process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path_factory.getbasetemp() / "twx_cache"))


@needs_java
def test_every_env_of_a_process_shares_one_jvm_closed_with_the_last_env():
    before = jvm.running_jvms()  # another test of this worker may hold another jar's JVM
    envs = [make_env(TWX, max_turns=5, **twx_kwargs("coin")) for _ in range(4)]
    started = {jar: pid for jar, pid in jvm.running_jvms().items() if jar not in before}
    assert len(started) == 1
    pids = set(started.values())
    for env in envs[:3]:
        env.close()
    assert jvm.running_jvms() and envs[3].reset(seed=1)[1]["admissible_actions"]
    envs[3].close()
    envs[3].close()  # closing twice is harmless
    assert jvm.running_jvms() == before and wait_dead(pids.pop())


@needs_java
def test_a_crashed_jvm_is_one_line_naming_the_game_and_the_seed():
    env = make_env(TWX, max_turns=5, **twx_kwargs("twc"))
    try:
        env.reset(seed=1)
        os.kill(env.unwrapped.sim.lease.pid, signal.SIGKILL)
        wait_dead(env.unwrapped.sim.lease.pid)
        with pytest.raises(jvm.SimulatorCrash) as err:
            env.step("look around")
        message = str(err.value)
        assert "\n" not in message and "twc" in message and "train seed 1 (reset seed 1)" in message
    finally:
        env.close()
    fresh = make_env(TWX, max_turns=5, **twx_kwargs("twc"))  # the next env starts a new JVM
    try:
        assert fresh.reset(seed=1)[1]["admissible_actions"]
    finally:
        fresh.close()


SCRIPT = """\
import os, sys, time
import gigpo_lab.envs
from gigpo_lab.envs import jvm, make_env
envs = [make_env("gigpo_lab/TextWorldExpress-v0", max_turns=5, game="coin", num_games=2, num_eval_games=1,
                 explore_walks=1, explore_length=5) for _ in range(3)]
for env in envs:
    env.reset(seed=0)
print("jvms", *jvm.running_jvms().values(), flush=True)
time.sleep(120)
"""


@needs_java
@pytest.mark.parametrize(
    "sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL], ids=["SIGTERM", "SIGKILL"]
)
def test_no_jvm_outlives_a_killed_run(tmp_path, sig):
    """A script without a main guard holds three envs; killing it leaves no JVM behind."""
    (tmp_path / "hold.py").write_text(SCRIPT)
    env = {**os.environ, "GIGPO_LAB_CACHE": os.environ["GIGPO_LAB_CACHE"]}
    proc = subprocess.Popen(
        [sys.executable, "hold.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "jvms" and len(line) == 2, line  # three envs, one JVM
        pid = int(line[1])
        assert alive(pid)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert wait_dead(pid), f"JVM {pid} outlived its run"
    finally:
        proc.kill()
        proc.wait()


@needs_java
@pytest.mark.slow  # 7 s: two worker processes, each with its JVM
def test_async_vector_env_plays_textworld_express():
    import gymnasium as gym

    make = lambda: gym.make(TWX, **twx_kwargs("coin"))  # noqa: E731
    make().close()  # the exploration cached once, before the workers start
    envs = gym.vector.AsyncVectorEnv([make, make])
    try:
        obs, infos = envs.reset(seed=[0, 1])
        names = envs.get_attr("action_names")
        first = [names[i].index(a[0]) for i, a in enumerate(infos["admissible_actions"])]
        obs, rewards, terminated, truncated, infos = envs.step(first)
        assert len(rewards) == 2 and all(len(o) > 0 for o in obs)
    finally:
        envs.close()
    assert not jvm.running_jvms()


def test_without_java_the_error_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    with pytest.raises(jvm.JavaMissing) as err:
        make_env(TWX, max_turns=5, **twx_kwargs("coin"))
    message = str(err.value)
    assert "\n" not in message and "install a Java runtime >= 11" in message and "TextWorldExpress" in message
    fake = tmp_path / "java"  # a Java 8 runtime is too old
    fake.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_402\"' >&2\n")
    fake.chmod(0o755)
    with pytest.raises(jvm.JavaMissing, match=r"needs Java >= 11, and .* is Java 8: install a Java runtime"):
        jvm.require_java("ScienceWorld")
