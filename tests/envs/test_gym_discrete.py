"""The GymDiscrete adapter: success modes, renderers, vocabulary."""

from __future__ import annotations

import gymnasium as gym
import pytest

from gigpo_lab.envs import make_env, tokenize

LAKE = {"kwargs": {"is_slippery": False}, "action_names": ["left", "down", "right", "up"]}
CLIFF_NAMES = ["up", "right", "down", "left"]


def play(env, seed, actions):
    env.reset(seed=seed)
    return [env.step(a) for a in actions]


def test_terminated_positive_marks_the_frozenlake_goal():
    env = make_env("FrozenLake-v1", max_turns=20, **LAKE)
    steps = play(env, 0, ["down", "down", "right", "right", "down", "right"])
    assert [s[4]["success"] for s in steps] == [False] * 5 + [True]
    assert steps[-1][1] == 1.0 and steps[-1][2]


def test_terminated_positive_ignores_falling_into_a_hole():
    env = make_env("FrozenLake-v1", max_turns=20, **LAKE)
    _, reward, term, _, info = play(env, 0, ["right", "down"])[-1]
    assert term and reward == 0.0 and not info["success"]


@pytest.mark.parametrize(
    ("mode", "expected"), [("terminated", True), ("never", False), ("terminated_positive", False)]
)
def test_success_modes_on_cliffwalking_goal(mode, expected):
    env = make_env("CliffWalking-v1", max_turns=20, action_names=CLIFF_NAMES, success_on=mode)
    steps = play(env, 0, ["up"] + ["right"] * 11 + ["down"])
    _, reward, term, _, info = steps[-1]
    assert term and reward == -1.0 and info["success"] is expected


def test_anchor_is_the_rendered_observation_and_actions_follow():
    env = make_env("CliffWalking-v1", max_turns=20, action_names=CLIFF_NAMES)
    obs, info = env.reset(seed=0)
    assert info["anchor"] == "36" and obs == "36\nActions: up, right, down, left"


def test_default_action_names_are_indices():
    env = make_env("CliffWalking-v1", max_turns=20)
    _, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["0", "1", "2", "3"]
    _, _, _, _, info = env.step("<action>0</action>")
    assert info["anchor"] == "24"


def test_vocabulary_is_exact_for_discrete_observations():
    env = make_env("CliffWalking-v1", max_turns=20, action_names=CLIFF_NAMES)
    vocab = env.unwrapped.vocabulary()
    assert {str(i) for i in range(48)} | set(CLIFF_NAMES) | {"Actions", ":", ",", "\n"} == set(vocab)


def test_vocabulary_is_best_effort_for_box_observations():
    env = make_env("CartPole-v1", max_turns=20, action_names=["left", "right"], renderer=f"{__name__}:round2")
    vocab = set(env.unwrapped.vocabulary())
    obs, _ = env.reset(seed=0)
    assert {"left", "right", "Actions"} <= vocab
    assert set(tokenize(obs)) <= vocab


def test_a_renderers_listed_words_join_the_vocabulary():
    """A word the renderer lists in ``vocabulary`` is in the adapter's vocabulary, though no state shows it."""
    env = make_env("CliffWalking-v1", max_turns=20, action_names=CLIFF_NAMES, renderer=f"{__name__}:cell")
    vocab = set(env.unwrapped.vocabulary())
    assert {"cell", "lava"} <= vocab  # "lava" is listed only; CliffWalking never shows it
    assert "lava" not in set(make_env("CliffWalking-v1", max_turns=20).unwrapped.vocabulary())  # str: no list


def cell(obs) -> str:
    """A renderer for the tests that lists a word it never writes here."""
    return f"cell {obs}"


cell.vocabulary = ["cell", "lava"]


def round2(obs) -> str:
    """A renderer for the tests: CartPole's four numbers rounded to 2 places."""
    return " ".join(f"{x:.2f}" for x in obs)


def accented(obs) -> str:
    """A renderer for the tests that leaves ASCII."""
    return f"\u00e9tat {obs}"


def test_renderer_must_return_printable_ascii():
    env = make_env("CliffWalking-v1", max_turns=5, renderer=f"{__name__}:accented")
    with pytest.raises(ValueError, match="printable ASCII.*Fix the renderer"):
        env.reset(seed=0)


def test_registered_adapter_id_works_directly():
    env = gym.make("gigpo_lab/GymDiscrete-v0", env_id="CliffWalking-v1", action_names=CLIFF_NAMES)
    obs, info = env.reset(seed=0)
    assert info["anchor"] == "36" and env.spec.max_episode_steps == 200
