"""Sokoban: every generated puzzle is solvable (checked by a BFS solver written here, from the anchor alone)."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest

from gigpo_lab.envs import make_env
from gigpo_lab.envs.sokoban_gen import generate_puzzle

DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


def parse(anchor: str):
    """(walls, targets, boxes, player) from an anchor grid; independent of the generator's data."""
    walls, targets, boxes, player = set(), set(), set(), None
    for r, line in enumerate(anchor.split("\n")):
        for c, ch in enumerate(line.split(" ")):
            if ch == "#":
                walls.add((r, c))
            if ch in "O*S":
                targets.add((r, c))
            if ch in "X*":
                boxes.add((r, c))
            if ch in "PS":
                player = (r, c)
    return walls, frozenset(targets), frozenset(boxes), player


def solve(anchor: str, limit: int = 200_000) -> list[str] | None:
    """A shortest action sequence that puts every box on a target (breadth-first search), or None."""
    walls, targets, boxes, player = parse(anchor)
    start = (player, boxes)
    parent = {start: None}
    queue = deque([start])
    while queue and len(parent) < limit:
        state = queue.popleft()
        pl, bx = state
        if bx <= targets:
            path = []
            while parent[state] is not None:
                state, move = parent[state]
                path.append(move)
            return path[::-1]
        for name, (dr, dc) in DIRS.items():
            nxt = (pl[0] + dr, pl[1] + dc)
            if nxt in walls:
                continue
            nb = bx
            if nxt in bx:
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if beyond in walls or beyond in bx:
                    continue
                nb = (bx - {nxt}) | {beyond}
            child = (nxt, nb)
            if child not in parent:
                parent[child] = (state, name)
                queue.append(child)
    return None


def test_parse_round_trip():
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=20)
    _, info = env.reset(seed=0)
    walls, targets, boxes, player = parse(info["anchor"])
    puzzle = env.unwrapped.puzzle
    assert walls == {tuple(p) for p in np.argwhere(puzzle.walls)}
    assert (targets, boxes, player) == (puzzle.targets, puzzle.boxes, puzzle.player)


def test_1000_default_puzzles_are_solvable_and_unsolved_at_start():
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=20)
    lengths = []
    for seed in range(1000):
        _, info = env.reset(seed=seed)
        _, targets, boxes, _ = parse(info["anchor"])
        assert not boxes <= targets, seed
        path = solve(info["anchor"])
        assert path is not None, f"seed {seed} is unsolvable:\n{info['anchor']}"
        lengths.append(len(path))
    assert max(lengths) <= 20  # the default max_turns leaves room for an optimal solution


def test_multi_box_puzzles_are_solvable():
    rng = np.random.default_rng(7)
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=50, height=7, width=7, num_boxes=2)
    for seed in rng.integers(0, 2**31, size=100):
        _, info = env.reset(seed=int(seed))
        assert len(parse(info["anchor"])[2]) == 2
        assert solve(info["anchor"]) is not None


def test_generator_is_deterministic_by_seed():
    a = generate_puzzle(np.random.default_rng(42), 6, 6, 1, 100)
    b = generate_puzzle(np.random.default_rng(42), 6, 6, 1, 100)
    assert (a.walls == b.walls).all() and (a.targets, a.boxes, a.player) == (b.targets, b.boxes, b.player)


def test_following_a_solution_pays_gym_sokoban_rewards():
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=50)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        path = solve(info["anchor"])
        rewards = []
        for move in path:
            _, reward, term, trunc, info = env.step(f"<action>{move}</action>")
            rewards.append(reward)
        assert term and not trunc and info["success"]
        # One box: no push of an optimal solution moves the box off a target, the last one puts it on (+1),
        # and solving adds +10; every step costs 0.1.
        assert sum(rewards) == pytest.approx(-0.1 * len(path) + 1.0 + 10.0)
        assert rewards[-1] == pytest.approx(-0.1 + 1.0 + 10.0)


def test_pushing_off_a_target_costs_one():
    env = gym.make("gigpo_lab/Sokoban-v0").unwrapped
    env.reset(seed=0)
    # A hand-made room: the box sits on a target with the player to its left and floor to its right.
    env.puzzle = type(env.puzzle)(
        walls=np.pad(np.zeros((1, 4), dtype=bool), 1, constant_values=True),
        targets=frozenset({(1, 2), (1, 4)}),
        boxes=frozenset({(1, 2)}),
        player=(1, 1),
    )
    env.height, env.width = env.puzzle.walls.shape
    env.boxes, env.player = {(1, 2)}, (1, 1)
    _, reward, term, _, _ = env.step(3)  # right: box (1, 2) -> (1, 3), off its target
    assert reward == pytest.approx(-1.1) and not term
    _, reward, term, _, info = env.step(3)  # right: box -> (1, 4), on a target; all boxes placed
    assert reward == pytest.approx(-0.1 + 1.0 + 10.0) and term and info["success"]


def test_blocked_moves_leave_the_state_and_cost_a_step():
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=50)
    for seed in range(20):  # the first level with a wall next to the player (there must be one)
        _, info = env.reset(seed=seed)
        walls, _, _, player = parse(info["anchor"])
        bumps = [name for name, (dr, dc) in DIRS.items() if (player[0] + dr, player[1] + dc) in walls]
        if bumps:
            break
    assert bumps, "no level of seeds 0-19 has a wall next to the player"
    _, reward, _, _, after = env.step(bumps[0])
    assert after["anchor"] == info["anchor"] and reward == pytest.approx(-0.1)
    assert not after["invalid"]  # a legal command that happens to bump into a wall


def test_there_and_back_gives_the_same_anchor():
    env = make_env("gigpo_lab/Sokoban-v0", max_turns=50)
    checked = 0
    for seed in range(20):
        _, start = env.reset(seed=seed)
        walls, _, boxes, player = parse(start["anchor"])
        for name, (dr, dc) in DIRS.items():
            nxt = (player[0] + dr, player[1] + dc)
            if nxt in walls or nxt in boxes:
                continue
            env.reset(seed=seed)
            _, _, _, _, there = env.step(name)
            _, _, _, _, back = env.step(OPPOSITE[name])
            assert back["anchor"] == start["anchor"] != there["anchor"]
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"height": 3}, "height and width >= 4"),
        ({"num_boxes": 0}, "num_boxes must be >= 1"),
        ({"height": 4, "width": 4, "num_boxes": 3}, "cannot hold 3 boxes"),
        ({"width": "6"}, "width must be an int"),
    ],
)
def test_bad_values_name_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("gigpo_lab/Sokoban-v0", **kwargs)
