"""ScienceWorld (gigpo_lab/ScienceWorld-v0): a real task in a real JVM, no mocks.

The gold path of a train and a dev variation completes the task (score 100); focusing on the wrong thing fails it
(score -100, the episode ends); a command the simulator cannot parse is an invalid turn; the env contract holds.
"""

from __future__ import annotations

import pytest
from java_benchmarks import SCIENCEWORLD, needs_java, needs_scienceworld

from gigpo_lab.envs import make_env, tokenize
from gigpo_lab.envs.textworld_env import EVAL_SEED_BASE

pytestmark = [needs_scienceworld, needs_java, pytest.mark.slow]  # 20 s: the task's first load and exploration
#: One train and one dev variation; the valid commands read at the start and the end of each gold path.
SMALL = {"task": "find-living-thing", "num_games": 1, "num_eval_games": 1, "explore_every": 100}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("GIGPO_LAB_CACHE", str(tmp_path_factory.getbasetemp() / "sw_cache"))
    made = make_env(SCIENCEWORLD, max_turns=40, step_limit=40, **SMALL)
    yield made
    made.close()
    mp.undo()


def test_the_gold_path_completes_the_task_on_train_and_dev(env):
    u = env.unwrapped
    for seed in (0, EVAL_SEED_BASE):
        env.reset(seed=seed)
        for _ in range(20):  # the simulator draws one of several gold paths (the animal to find); take one
            u.sim.load(u.instance[1], gold=True)  # the vocabulary covers (it holds the explored one)
            gold = list(u.sim.server.getGoldActionSequence())
            if set(gold) <= set(u.action_names):
                break
        _, info = env.reset(seed=seed)
        start = u._state["score"]
        total = 0.0
        for command in gold:
            _, reward, terminated, truncated, info = env.step(command)
            total += reward
            assert not info["invalid"] and not truncated
            if terminated:
                break
        assert info["success"] and terminated and start + total == 100
    assert u.instance == ("dev", u.held_out[0])


def test_a_wrong_focus_fails_with_minus_100_and_an_unknown_command_is_invalid(env):
    obs, info = env.reset(seed=0)
    again, reward, terminated, _, after = env.step("blorp")
    assert after["invalid"] and after["invalid_reason"] == "unparsed" and not terminated
    assert after["anchor"] == info["anchor"]
    start = env.unwrapped._state["score"]
    _, reward, terminated, _, lost = env.step("focus on agent")
    assert terminated and not lost["success"] and reward == -100 - start


def test_the_env_contract_holds_on_the_gold_path(env):
    obs, info = env.reset(seed=0)
    vocab = set(env.unwrapped.vocabulary())
    assert "Command templates: " in obs and "Task" not in info["anchor"]
    assert set(info["admissible_actions"]) <= set(env.unwrapped.action_names)
    assert set(tokenize(obs) + tokenize(info["anchor"])) <= vocab
    assert env.reset(seed=0)[0] == obs  # the same seed, the same start
