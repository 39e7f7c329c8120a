"""The contract every gigpo_lab env keeps: gymnasium's checker, seeding, info keys, vocabulary."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gigpo_lab.envs import INFO_KEYS, make_env, tokenize

CLIFF = {"action_names": ["up", "right", "down", "left"], "success_on": "terminated"}

#: (id, env kwargs): every built-in env, its main variants, and two adapted gymnasium envs.
CASES = [
    ("gigpo_lab/FrozenLake-v0", {}),
    ("gigpo_lab/FrozenLake-v0", {"size": 8}),
    ("gigpo_lab/FrozenLake-v0", {"size": 5, "random_map": True}),
    ("gigpo_lab/FrozenLake-v0", {"is_slippery": True}),
    ("gigpo_lab/Sokoban-v0", {}),
    ("gigpo_lab/Sokoban-v0", {"height": 7, "width": 8, "num_boxes": 2}),
    ("gigpo_lab/Household-v0", {}),
    ("gigpo_lab/Household-v0", {"num_receptacles": 7, "num_distractors": 6}),
    ("CliffWalking-v1", CLIFF),
    ("FrozenLake-v1", {"kwargs": {"is_slippery": False}, "action_names": ["left", "down", "right", "up"]}),
]
IDS = [f"{i}{kw}" for i, kw in CASES]
WRAPPER_KEYS = (*INFO_KEYS, "invalid_reason", "action")


def base_env(env_id: str, kwargs: dict) -> gym.Env:
    """The unwrapped text env, made through gymnasium (so it has a spec)."""
    if env_id.startswith("gigpo_lab/"):
        return gym.make(env_id, **kwargs)
    return gym.make("gigpo_lab/GymDiscrete-v0", env_id=env_id, **kwargs)


def rollout(env, seed: int, actions: list[str]) -> list[tuple]:
    """Reset with ``seed`` and play ``actions`` (text) until the episode ends; every return value."""
    obs, info = env.reset(seed=seed)
    out = [(obs, info)]
    for text in actions:
        obs, reward, term, trunc, info = env.step(text)
        out.append((obs, reward, term, trunc, info))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_check_env_base_and_wrapped(env_id, kwargs):
    check_env(base_env(env_id, kwargs).unwrapped)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(make_env(env_id, max_turns=5, **kwargs))


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_same_seed_same_start_and_trajectory(env_id, kwargs):
    env_a, env_b = make_env(env_id, max_turns=30, **kwargs), make_env(env_id, max_turns=30, **kwargs)
    _, info = env_a.reset(seed=11)
    rng = np.random.default_rng(0)
    actions = [str(rng.choice(env_a.unwrapped.action_names)) for _ in range(30)]
    a, b = rollout(env_a, 11, actions), rollout(env_b, 11, actions)
    assert a == b
    # A reset with the same seed after playing replays it again.
    assert rollout(env_a, 11, actions) == a


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        c
        for c in CASES
        if c[0] in ("gigpo_lab/Sokoban-v0", "gigpo_lab/Household-v0") or c[1].get("random_map")
    ],
)
def test_different_seeds_give_different_starts(env_id, kwargs):
    env = make_env(env_id, max_turns=5, **kwargs)
    anchors = {env.reset(seed=s)[1]["anchor"] for s in range(20)}
    assert len(anchors) >= 15


@pytest.mark.parametrize(("env_id", "kwargs"), CASES[:2], ids=["4x4", "8x8"])
def test_fixed_map_is_the_same_for_every_seed(env_id, kwargs):
    env = make_env(env_id, max_turns=5, **kwargs)
    assert len({env.reset(seed=s)[0] for s in range(10)}) == 1


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_play_keeps_the_contract(env_id, kwargs, data):
    """Random text (admissible or not) never crashes; infos, spaces and the vocabulary hold on every step."""
    env = make_env(env_id, max_turns=12, **kwargs)
    vocab = set(env.unwrapped.vocabulary())
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    obs, info = env.reset(seed=seed)
    steps = [(obs, info)]
    for _ in range(12):
        admissible = info["admissible_actions"]
        text = data.draw(st.one_of(st.sampled_from(admissible), st.text(max_size=12)), label="action")
        obs, reward, term, trunc, info = env.step(text)
        assert isinstance(reward, float) and isinstance(term, bool) and isinstance(trunc, bool)
        assert term or not info["success"]  # success only on a terminating step
        steps.append((obs, info))
        if term or trunc:
            break
    for obs, info in steps:
        assert set(WRAPPER_KEYS) <= set(info)
        assert obs in env.observation_space
        assert isinstance(info["anchor"], str) and info["anchor"]
        assert info["admissible_actions"] and set(info["admissible_actions"]) <= set(
            env.unwrapped.action_names
        )
        seen = (
            tokenize(obs)
            + tokenize(info["anchor"])
            + [t for a in env.unwrapped.action_names for t in tokenize(a)]
        )
        assert set(seen) <= vocab, set(seen) - vocab


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=IDS)
def test_anchor_is_a_function_of_the_state(env_id, kwargs):
    """Replaying the same seed and actions gives the same anchors; an anchor has no instruction text."""
    env = make_env(env_id, max_turns=10, **kwargs)
    rng = np.random.default_rng(1)
    actions = [str(rng.choice(env.unwrapped.action_names)) for _ in range(10)]
    first = [step[-1]["anchor"] for step in rollout(env, 3, actions)]
    again = [step[-1]["anchor"] for step in rollout(env, 3, actions)]
    assert first == again
    assert all("Actions" not in a and "task" not in a for a in first)


@pytest.mark.parametrize(("env_id", "kwargs"), CASES[:1] + CASES[4:5] + CASES[6:7], ids=["fl", "sok", "hh"])
def test_render_ansi_is_the_observation(env_id, kwargs):
    env = base_env(env_id, {**kwargs, "render_mode": "ansi"})
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
