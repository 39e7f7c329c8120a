"""TextWorld from any script (issue #63): a script with no ``if __name__ == "__main__":`` guard makes its games
on an empty cache, under the platform's default start method and under ``forkserver`` (Python 3.14's
default), because the game workers run the lab's own module in a fresh interpreter and never import the
caller's main module; and ``AsyncVectorEnv`` plays TextWorld."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("textworld")

SCRIPT = """\
import multiprocessing
{start_method}
import gymnasium as gym
import gigpo_lab.envs  # registers the lab's envs

env = gym.make("gigpo_lab/TextWorld-v0", settings={{"level": 1}}, num_games=1, num_eval_games=1)
obs, info = env.reset(seed=0)
obs, reward, terminated, truncated, info = env.step(env.unwrapped.action_names.index(info["admissible_actions"][0]))
env.close()
print("played", len(obs) > 0)
"""


# forkserver takes the same path as the default start method (the workers never use multiprocessing): slow
@pytest.mark.parametrize("start_method", [None, pytest.param("forkserver", marks=pytest.mark.slow)])
def test_a_script_without_a_main_guard_makes_its_games_on_an_empty_cache(tmp_path, start_method):
    line = f"multiprocessing.set_start_method({start_method!r})" if start_method else ""
    (tmp_path / "play.py").write_text(SCRIPT.format(start_method=line))
    env = {**os.environ, "GIGPO_LAB_CACHE": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "play.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("played True")
    games = list((tmp_path / "cache").rglob("g*.z8"))
    assert len(games) == 2, games  # a training game and an evaluation game, made by two worker processes
    assert "bootstrapping phase" not in run.stderr


def test_async_vector_env_plays_textworld(tmp_path, monkeypatch):
    import gymnasium as gym

    import gigpo_lab.envs  # noqa: F401  (registers the lab's envs)

    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path / "cache"))
    make = lambda: gym.make("gigpo_lab/TextWorld-v0", settings={"level": 1}, num_games=2, num_eval_games=1)  # noqa: E731
    envs = gym.vector.AsyncVectorEnv([make, make])
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert len(obs) == 2 and all(len(o) > 0 for o in obs)
        names = envs.get_attr("action_names")
        first = [names[i].index(a[0]) for i, a in enumerate(infos["admissible_actions"])]
        obs, rewards, terminated, truncated, infos = envs.step(first)
        assert len(rewards) == 2
    finally:
        envs.close()
