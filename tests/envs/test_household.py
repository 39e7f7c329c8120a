"""Household: a test-side planner solves every world; invalid commands change nothing; anchors."""

from __future__ import annotations

import gymnasium as gym
import pytest

from gigpo_lab.envs import make_env
from gigpo_lab.envs.household_world import RECEPTACLES, TASKS


def plan(world) -> list[str]:
    """Commands that solve ``world`` from its start, read off the world's state (not the env's code)."""
    cmds, here, opened = [], world.location, set(world.opened)

    def go_and_open(rec):
        nonlocal here
        if here != rec:
            cmds.append(f"go to {rec}")
            here = rec
        if RECEPTACLES[rec][1] and rec not in opened:
            cmds.append(f"open {rec}")
            opened.add(rec)

    obj, start = world.goal_obj, world.where[world.goal_obj]
    go_and_open(start)
    cmds.append(f"take {obj} from {start}")
    if TASKS[world.task] is not None:
        tool, verb, _ = TASKS[world.task]
        if here != tool:
            cmds.append(f"go to {tool}")
            here = tool
        cmds.append(f"{verb} {obj} with {tool}")
    go_and_open(world.goal_rec)
    cmds.append(f"put {obj} {RECEPTACLES[world.goal_rec][0]} {world.goal_rec}")
    return cmds


def test_planned_commands_reach_success_with_reward_10():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    tasks, longest = set(), 0
    for seed in range(300):
        _, info = env.reset(seed=seed)
        commands = plan(env.unwrapped.world)
        longest = max(longest, len(commands))
        tasks.add(env.unwrapped.world.task)
        for i, command in enumerate(commands):
            assert command in info["admissible_actions"], (seed, command, info["admissible_actions"])
            _, reward, term, trunc, info = env.step(f"<action>{command}</action>")
            assert not info["invalid"]
            last = i == len(commands) - 1
            assert (reward, term, info["success"]) == ((10.0, True, True) if last else (0.0, False, False))
    assert tasks == set(TASKS)
    assert longest <= 8


@pytest.mark.parametrize("text", ["jump", "<action>fly to moon</action>", "", "take", "go to"])
def test_invalid_text_changes_nothing(text):
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    obs, info = env.reset(seed=4)
    obs2, reward, term, trunc, info2 = env.step(text)
    assert info2["invalid"] and info2["invalid_reason"] == "unparsed"
    assert (obs2, reward, term, trunc) == (obs, 0.0, False, False)
    assert info2["anchor"] == info["anchor"]


def test_inadmissible_commands_are_flagged_and_change_nothing():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    _, info = env.reset(seed=4)
    world = env.unwrapped.world
    absent = next(
        o for o in ("apple", "bowl", "bread", "egg", "mug", "plate", "potato") if o not in world.where
    )
    rec = world.receptacles[0]
    for command in (f"take {absent} from {rec}", f"put {world.goal_obj} in {rec}", f"open {rec}"):
        assert command not in info["admissible_actions"]  # nothing is held; the agent is not at rec yet
        _, reward, term, _, after = env.step(command)
        assert after["invalid"] and after["invalid_reason"] == "inadmissible" and reward == 0.0 and not term
        assert after["anchor"] == info["anchor"]


def test_base_env_flags_inadmissible_indices():
    env = gym.make("gigpo_lab/Household-v0").unwrapped
    _, info = env.reset(seed=1)
    index = next(i for i, a in enumerate(env.action_names) if a not in info["admissible_actions"])
    obs, reward, term, _, after = env.step(index)
    assert after["invalid"] and reward == 0.0 and not term and "Nothing happens." in obs
    assert after["anchor"] == info["anchor"]


def test_look_and_inventory_change_only_the_feedback():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    _, info = env.reset(seed=2)
    for command in ("look", "inventory"):
        obs, _, _, _, after = env.step(command)
        assert after["anchor"] == info["anchor"] and not after["invalid"]
    assert "You are not carrying anything." in obs


def test_same_state_by_different_paths_gives_equal_anchors():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    _, info = env.reset(seed=0)
    world = env.unwrapped.world
    closable = next(r for r in world.receptacles if RECEPTACLES[r][1])
    other = next(r for r in world.receptacles if r != closable)

    def anchor_after(commands):
        _, info = env.reset(seed=0)
        for command in commands:
            _, _, _, _, info = env.step(command)
            assert not info["invalid"], command
        return info["anchor"]

    direct = anchor_after([f"go to {other}"])
    assert direct == anchor_after([f"go to {closable}", f"go to {other}"])
    assert direct == anchor_after([f"go to {closable}", "look", "inventory", f"go to {other}"])
    closed = anchor_after([f"go to {closable}"])
    assert closed == anchor_after([f"go to {closable}", f"open {closable}", f"close {closable}"])
    opened = anchor_after([f"go to {closable}", f"open {closable}"])
    assert len({info["anchor"], direct, closed, opened}) == 4


def test_anchor_lists_goal_location_open_and_objects():
    env = make_env("gigpo_lab/Household-v0", max_turns=30)
    _, info = env.reset(seed=5)
    world = env.unwrapped.world
    lines = info["anchor"].split("\n")
    assert len(lines) == 3
    assert lines[0].startswith("goal: put ") and world.goal_obj in lines[0] and world.goal_rec in lines[0]
    assert lines[1] == "at: room | open: none"
    assert all(f"{o}: {r}" in lines[2] for o, r in world.where.items())


def test_carrying_and_flags_show_in_the_anchor():
    env = make_env("gigpo_lab/Household-v0", max_turns=30, task_types=["heat"])
    _, info = env.reset(seed=6)
    world = env.unwrapped.world
    commands = plan(world)
    for command in commands[: commands.index(f"heat {world.goal_obj} with microwave") + 1]:
        _, _, _, _, info = env.step(command)
    assert f"{world.goal_obj}: hand hot" in info["anchor"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task_types": ["place", "juggle"]}, "task_types must be a non-empty subset"),
        ({"task_types": []}, "task_types must be a non-empty subset"),
        ({"num_receptacles": 9}, r"num_receptacles must be an int in \[2, 7\]"),
        ({"num_distractors": -1}, r"num_distractors must be an int in \[0, 6\]"),
    ],
)
def test_bad_values_name_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("gigpo_lab/Household-v0", **kwargs)
