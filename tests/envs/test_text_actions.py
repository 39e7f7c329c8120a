"""TextActionWrapper: which texts are actions, what an invalid turn does, and turn counting."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.envs import TextActionWrapper, make_env

START = "P F F F\nF H F H\nF F F H\nH F F G"
AFTER_RIGHT = "S P F F\nF H F H\nF F F H\nH F F G"


def lake(max_turns: int = 10, **kwargs) -> TextActionWrapper:
    return make_env("gigpo_lab/FrozenLake-v0", max_turns=max_turns, **kwargs)


@pytest.mark.parametrize(
    "text",
    [
        "<action>RIGHT</action>",
        "<action> right </action>",
        "  right ",
        "Right",
        "RIGHT\n",
        "I think I should move right.\n<ACTION>right</ACTION>",
        "<action>left</action> no, wait: <action>right</action>",  # the last match wins
    ],
)
def test_accepted_forms(text):
    env = lake()
    env.reset(seed=0)
    _, _, _, _, info = env.step(text)
    assert not info["invalid"] and info["action"] == "right" and info["anchor"] == AFTER_RIGHT


@pytest.mark.parametrize("text", ["<action>LEFT</action>", "  left ", "Left"])
def test_spec_examples_are_accepted(text):
    env = lake()
    env.reset(seed=0)
    _, _, _, _, info = env.step(text)
    assert not info["invalid"] and info["action"] == "left"


@pytest.mark.parametrize(
    "text",
    [
        "jump",
        "<action>jump</action>",
        "",
        "   ",
        "move left",
        "<action></action>",
        "left right",
        "<action>left",
    ],
)
def test_invalid_texts_leave_the_state(text):
    env = lake()
    obs, info = env.reset(seed=0)
    obs2, reward, term, trunc, info2 = env.step(text)
    assert info2["invalid"] and info2["action"] == "" and not info2["success"]
    assert (obs2, reward, term, trunc) == (obs, 0.0, False, False)
    assert info2["anchor"] == info["anchor"] and info2["admissible_actions"] == info["admissible_actions"]


@pytest.mark.parametrize("invalid_every", [1, 2, 3])
def test_every_turn_counts_once_and_truncation_is_exact(invalid_every):
    max_turns = 7
    env = lake(max_turns=max_turns)
    env.reset(seed=0)
    for turn in range(1, max_turns + 1):
        text = "jump" if turn % invalid_every == 0 else ("left" if turn % 2 else "up")  # stay in the corner
        _, _, term, trunc, info = env.step(text)
        assert env.turn == turn and not term
        assert trunc is (turn == max_turns), turn
        assert info["invalid"] is (turn % invalid_every == 0)
    env.reset(seed=0)
    assert env.turn == 0


def test_valid_turns_alone_truncate_at_max_turns_too():
    env = lake(max_turns=3)
    env.reset(seed=0)
    truncs = [env.step("left")[3] for _ in range(3)]
    assert truncs == [False, False, True]


def test_custom_action_pattern():
    env = lake(action_pattern=r"Action:\s*(\w+)")
    env.reset(seed=0)
    assert not env.step("Action: right")[4]["invalid"]
    assert env.step("<action>down</action>")[4]["invalid"]
    assert not env.step("down")[4]["invalid"]  # a bare admissible action is always accepted


def test_only_admissible_actions_pass_through_the_wrapper():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step("<action>close fridge</action>")
    assert info["invalid"] and info["invalid_reason"] == "inadmissible"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"action_pattern": "<action>.*</action>"}, ValueError, "exactly one capture group"),
        ({"action_pattern": "(("}, ValueError, "not a valid regex"),
        ({"max_turns": 0}, ValueError, "max_turns must be an int >= 1"),
    ],
)
def test_bad_wrapper_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        TextActionWrapper(gym.make("gigpo_lab/FrozenLake-v0"), **{"max_turns": 5, **kwargs})


def test_non_text_action_and_step_before_reset():
    env = lake()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("left")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(2)


def test_name_defaults_to_the_id_and_can_be_set():
    assert lake().name == "frozenlake"
    assert lake(name="fl4").name == "fl4"


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=40))
def test_arbitrary_text_is_either_an_admissible_action_or_invalid(text):
    env = lake()
    _, info = env.reset(seed=0)
    _, reward, _, _, after = env.step(text)
    if after["invalid"]:
        assert after["anchor"] == info["anchor"] and reward == 0.0
    else:
        assert after["action"] in info["admissible_actions"]


def test_an_invalid_turn_pays_invalid_reward_and_leaves_the_state():
    from gigpo_lab.envs import make_env

    env = make_env(
        "CliffWalking-v1", max_turns=5, invalid_reward=-1.0, action_names=["up", "right", "down", "left"]
    )
    obs, info = env.reset(seed=0)
    after, reward, terminated, truncated, step_info = env.step("jump")
    assert (after, reward, terminated, truncated) == (obs, -1.0, False, False)
    assert step_info["invalid"] and step_info["anchor"] == info["anchor"]
    default = make_env("CliffWalking-v1", max_turns=5)
    default.reset(seed=0)
    assert default.step("jump")[1] == 0.0  # the default: an invalid turn pays nothing
