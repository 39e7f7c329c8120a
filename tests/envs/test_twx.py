"""TextWorldExpress (gigpo_lab/TextWorldExpress-v0): real games in a real JVM, no mocks.

Each game's gold path wins on train and dev seeds with the library's reward; the anchor ignores the feedback;
seeds map to the folds; invalid commands leave the game; the library's step limit follows max_turns; the env
contract holds; the presets compose and build.
"""

from __future__ import annotations

import warnings

import pytest
from gymnasium.utils.env_checker import check_env
from java_benchmarks import TWX, TWX_SMALL, needs_java, needs_twx, twx_kwargs

from gigpo_lab.envs import make_env, tokenize
from gigpo_lab.envs.textworld_env import EVAL_SEED_BASE

pytestmark = [needs_twx, needs_java]
GAMES = ["twc", "cookingworld", "coin"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path_factory.getbasetemp() / "twx_cache"))


@pytest.fixture(scope="module")
def envs():
    """One env of each game (the JVM and its exploration shared by the module's tests)."""
    made = {}
    for game in GAMES:
        made[game] = make_env(TWX, max_turns=60, step_limit=60, **twx_kwargs(game))
    yield made
    for env in made.values():
        env.close()


def gold_path(env) -> list[str]:
    u = env.unwrapped
    fold, seed = u.instance
    u.sim.reset(seed, fold, gold=True)
    return u.sim.gold()


@pytest.mark.parametrize("game", GAMES)
def test_the_gold_path_wins_with_the_librarys_reward(envs, game):
    env = envs[game]
    for seed in (0, 2, EVAL_SEED_BASE + 1):
        env.reset(seed=seed)
        steps = gold_path(env)
        _, info = env.reset(seed=seed)
        total, played = 0.0, 0
        for command in steps:
            played += 1
            assert command in info["admissible_actions"] or command == "look around"
            _, reward, terminated, truncated, info = env.step(f"<action>{command}</action>")
            total += reward
            assert not info["invalid"] and not truncated
            if terminated:
                break
        assert info["success"] and terminated and played == len(steps)
        assert total == pytest.approx(1.0)


def test_seeds_map_to_the_folds_and_a_group_plays_one_instance(envs):
    env = envs["twc"].unwrapped
    assert env.train == [0, 1, 2] and env.held_out == [
        10000,
        10001,
    ]  # the library's folds: train 0-999, dev 10000-
    plays = {}
    for seed in (0, 3, 10_000_004, EVAL_SEED_BASE, EVAL_SEED_BASE + 3):
        env.reset(seed=seed)
        plays[seed] = env.instance
    assert plays[0] == plays[3] == ("train", 0) and plays[10_000_004] == ("train", 2)
    assert plays[EVAL_SEED_BASE] == ("dev", 10000) and plays[EVAL_SEED_BASE + 3] == ("dev", 10001)
    test_fold = make_env(TWX, max_turns=5, eval_fold="test", **twx_kwargs("coin"))
    try:
        test_fold.reset(seed=EVAL_SEED_BASE)
        assert test_fold.unwrapped.instance == ("test", 20000)
    finally:
        test_fold.close()


def test_the_anchor_is_room_inventory_and_score_not_the_feedback(envs):
    env = envs["twc"]
    _, start = env.reset(seed=0)
    assert start["anchor"].startswith("Room: You are in the ") and "Inventory: " in start["anchor"]
    assert "Task" not in start["anchor"]
    obs, _, _, _, looked = env.step("look around")
    _, _, _, _, listed = env.step("inventory")
    assert start["anchor"] == looked["anchor"] == listed["anchor"]
    take = next(a for a in start["admissible_actions"] if a.startswith("take "))
    obs, _, _, _, taken = env.step(take)
    assert taken["anchor"] != start["anchor"] and obs.splitlines()[1].startswith("You take")


def test_a_command_outside_the_admissible_ones_is_invalid_and_leaves_the_game(envs):
    env = envs["cookingworld"]
    obs, info = env.reset(seed=1)
    outside = next(a for a in env.unwrapped.action_names if a not in info["admissible_actions"])
    again, reward, terminated, truncated, after = env.step(outside)
    assert after["invalid"] and after["invalid_reason"] == "inadmissible" and reward == 0.0
    assert again == obs and after["anchor"] == info["anchor"] and not terminated
    assert env.step("dance wildly")[4]["invalid_reason"] == "unparsed"


def test_the_librarys_step_limit_follows_max_turns():
    env = make_env(TWX, max_turns=3, step_limit=3, **twx_kwargs("coin"))
    try:
        env.reset(seed=0)
        ends = [env.step("look around")[2:4] for _ in range(3)]
        assert ends == [(False, False), (False, False), (False, True)]
    finally:
        env.close()


@pytest.mark.parametrize("game", GAMES)
def test_the_env_contract_holds(envs, game):
    env = envs[game]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        check_env(env.unwrapped, skip_render_check=True)
    vocab = set(env.unwrapped.vocabulary())
    for seed in (0, 1, EVAL_SEED_BASE):
        obs, info = env.reset(seed=seed)
        for k in range(12):
            assert obs in env.observation_space and info["admissible_actions"]
            assert set(info["admissible_actions"]) <= set(env.unwrapped.action_names)
            seen = tokenize(obs) + tokenize(info["anchor"])
            assert set(seen) <= vocab, set(seen) - vocab
            obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][(seed + k) % 3])
            assert terminated or not info["success"]
            if terminated or truncated:
                break


def test_the_same_seed_replays_the_same_episode(envs):
    env = envs["twc"]
    plays = []
    for _ in range(2):
        obs, info = env.reset(seed=2)
        trace = [obs]
        for k in range(6):
            obs, *_ = env.step(info["admissible_actions"][k % len(info["admissible_actions"])])
            trace.append(obs)
        plays.append(trace)
    assert plays[0] == plays[1]


@pytest.mark.parametrize("option", ["twx_twc", "twx_cookingworld", "twx_coin"])
def test_the_presets_compose_and_their_step_limit_is_max_turns(option):
    from hydra.utils import instantiate

    from gigpo_lab.config_paths import compose_config

    cfg = compose_config(
        [f"env={option}", "env.max_turns=7", *(f"env.{k}={v}" for k, v in TWX_SMALL.items())]
    )
    env = instantiate(cfg.env)
    try:
        assert env.unwrapped.step_limit == 7 and env.max_turns == 7
        assert env.reset(seed=0)[1]["admissible_actions"]
    finally:
        env.close()
