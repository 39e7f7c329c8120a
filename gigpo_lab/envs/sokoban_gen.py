"""Sokoban puzzle generation by reverse play: every puzzle is solvable by construction.

The idea is the one of gym-sokoban (Schrader 2018, used by RAGEN and verl-agent), written from its
description, not its code:

1. Carve a room: a random walk inside the border walls turns wall cells into floor.
2. Put the boxes on targets (a solved state) and the player on a free floor cell.
3. Play backwards: the player walks at random, and when it steps away from an adjacent box it may
   *pull* the box along. A pull is the exact reverse of a push, and a walk is the reverse of a walk,
   so the reversed sequence of moves solves the puzzle from every state visited on the way.
4. Keep the visited state whose boxes moved farthest from their targets (sum of Manhattan
   distances; among ties the last one, where the player has wandered off the box) and require at
   least one box off its target.

Everything is drawn from one ``numpy.random.Generator``, so a seed gives one puzzle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Pos = tuple[int, int]

#: (row, col) offsets of up, down, left, right.
MOVES: tuple[Pos, ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))


@dataclass(frozen=True)
class Puzzle:
    """A Sokoban level: ``walls`` is a (height, width) bool array; positions are (row, col)."""

    walls: np.ndarray
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    @property
    def shape(self) -> tuple[int, int]:
        return self.walls.shape


def carve_room(rng: np.random.Generator, height: int, width: int, floor_fraction: float = 0.6) -> np.ndarray:
    """Walls everywhere, then a random walk (with 1x1, 1x2 and 2x1 brushes) carves the floor.

    The walk stops once ``floor_fraction`` of the inner cells are floor. The border always stays
    wall. The walk keeps its direction with probability 0.65, as in gym-sokoban's room topology.
    """
    walls = np.ones((height, width), dtype=bool)
    row, col = int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1))
    direction = MOVES[int(rng.integers(4))]
    brushes = (((0, 0),), ((0, 0), (0, 1)), ((0, 0), (1, 0)))
    target = int(np.ceil(floor_fraction * (height - 2) * (width - 2)))
    for _ in range(100 * height * width):
        if (~walls).sum() >= target:
            break
        for dr, dc in brushes[int(rng.integers(len(brushes)))]:
            r, c = row + dr, col + dc
            if 0 < r < height - 1 and 0 < c < width - 1:
                walls[r, c] = False
        if rng.random() < 0.35:
            direction = MOVES[int(rng.integers(4))]
        row = min(max(row + direction[0], 1), height - 2)
        col = min(max(col + direction[1], 1), width - 2)
    return walls


def reverse_play(
    rng: np.random.Generator,
    walls: np.ndarray,
    targets: list[Pos],
    player: Pos,
    steps: int,
    pull_prob: float = 0.8,
) -> tuple[frozenset[Pos], Pos, int]:
    """Walk backwards from the solved state; return the boxes, player and score of the best state.

    Each step picks one of the player's free neighbouring cells; a box right behind the player is
    pulled along with probability ``pull_prob``.

    The score of a state is the sum over boxes of the Manhattan distance to the target the box
    started on. Boxes keep their identity through pulls, so the score measures displacement.
    """
    boxes = list(targets)
    best = (frozenset(boxes), player, 0)
    for _ in range(steps):
        occupied = set(boxes)
        legal = []
        for dr, dc in MOVES:
            nr, nc = player[0] + dr, player[1] + dc
            if not walls[nr, nc] and (nr, nc) not in occupied:
                legal.append((dr, dc))
        if not legal:
            break
        dr, dc = legal[int(rng.integers(len(legal)))]
        behind = (player[0] - dr, player[1] - dc)
        if behind in occupied and rng.random() < pull_prob:
            boxes[boxes.index(behind)] = player
        player = (player[0] + dr, player[1] + dc)
        score = sum(abs(b[0] - t[0]) + abs(b[1] - t[1]) for b, t in zip(boxes, targets, strict=True))
        if score >= best[2] and score > 0:
            best = (frozenset(boxes), player, score)
    return best


def generate_puzzle(
    rng: np.random.Generator,
    height: int,
    width: int,
    num_boxes: int,
    reverse_steps: int,
    floor_fraction: float = 0.6,
    max_tries: int = 1000,
) -> Puzzle:
    """A solvable puzzle with ``num_boxes`` boxes, at least one of them off its target.

    Args:
        rng: the only source of randomness (a seed gives one puzzle).
        height, width: room size including the border walls (at least 4 each; 6x6 is RAGEN's).
        num_boxes: number of boxes and targets.
        reverse_steps: length of the backwards random walk; longer walks give harder puzzles and
            bound the length of the constructed solution.
        floor_fraction: share of the inner cells carved into floor.
        max_tries: rooms to try before giving up (a room fails when no box can be moved off).
    """
    if height < 4 or width < 4:
        raise ValueError(
            f"Sokoban needs height and width >= 4 (border walls included); got {height}x{width}."
        )
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}.")
    if reverse_steps < 1:
        raise ValueError(f"reverse_steps must be >= 1, got {reverse_steps}.")
    inner = (height - 2) * (width - 2)
    if inner < num_boxes + 2:
        raise ValueError(
            f"A {height}x{width} room cannot hold {num_boxes} boxes; enlarge it or use fewer boxes."
        )
    for _ in range(max_tries):
        walls = carve_room(rng, height, width, floor_fraction)
        floor = [tuple(int(v) for v in p) for p in np.argwhere(~walls)]
        if len(floor) < num_boxes + 2:
            continue
        picks = rng.permutation(len(floor))[: num_boxes + 1]
        targets = [floor[i] for i in picks[:num_boxes]]
        player = floor[picks[num_boxes]]
        boxes, player, score = reverse_play(rng, walls, targets, player, reverse_steps)
        if score > 0 and boxes != frozenset(targets):
            return Puzzle(walls=walls, targets=frozenset(targets), boxes=boxes, player=player)
    raise RuntimeError(
        f"No solvable {height}x{width} puzzle with {num_boxes} boxes in {max_tries} tries; "
        "use a larger room or fewer boxes."
    )
