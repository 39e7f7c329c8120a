"""A text renderer for MiniGrid's observations, for the ``gym_discrete`` adapter's ``renderer`` key.

MiniGrid (Farama, ``pip install minigrid``; Chevalier-Boisvert et al. 2023, arXiv 2306.13831) observes a
dict: ``image`` (the agent's egocentric view, ``(view, view, 3)`` ints: object, colour, state per cell),
``direction`` (0 east, 1 south, 2 west, 3 north) and ``mission`` (a sentence). This renderer spells out
the first two and nothing else, so it is one renderer for every MiniGrid task, tuned to none:

    facing east
    # # # # # # #
    # # # # # # #
    # # G . . . #
    ...

- One symbol per cell, rows from the farthest (top) to the agent's own row (bottom); the agent stands at the
  bottom row's middle, facing up, as MiniGrid lays the view out. The agent's own cell shows what it carries.
- Colours and the mission are left out: they carry no information in tasks with one object of each kind
  (Empty, DoorKey, LavaGap), and a task that needs them (``GoToObject``, ``KeyCorridor``) needs another renderer.
- It reads the observation only: no reward, no position, no knowledge of the goal.
- :data:`minigrid_view.vocabulary` lists every symbol, so the adapter's vocabulary holds the cells a random
  walk does not meet (an open door, say) and the tokenizer never maps them to ``<unk>``.

    env=gym_discrete env.id=minigrid:MiniGrid-DoorKey-5x5-v0 env.renderer=gigpo_lab.envs.minigrid_view:minigrid_view \
        "env.action_names=[left,right,forward,pickup,drop,toggle,done]"
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_lab.envs.base import render_grid

#: MiniGrid's object indices (``minigrid.core.constants.OBJECT_TO_IDX``, minigrid 3.x) and their symbols.
#: A door's symbol depends on its state (see :data:`DOOR_SYMBOLS`).
OBJECT_SYMBOLS = {
    0: "?",  # unseen: behind a wall or outside the view
    1: ".",  # empty
    2: "#",  # wall
    3: "_",  # floor
    5: "K",  # key
    6: "B",  # ball
    7: "X",  # box
    8: "G",  # goal
    9: "L",  # lava
    10: "A",  # an agent: only in a fully observed grid (FullyObsWrapper), never in the egocentric view
}
DOOR = 4
#: A door's state (``minigrid.core.constants.STATE_TO_IDX``: 0 open, 1 closed, 2 locked) and its symbol.
DOOR_SYMBOLS = {0: "o", 1: "d", 2: "D"}
#: MiniGrid's directions (``minigrid.core.constants.DIR_TO_VEC``: 0 is +x, 1 is +y, the grid's y pointing down).
DIRECTIONS = ("east", "south", "west", "north")


def _cell(obj: int, state: int) -> str:
    symbols = DOOR_SYMBOLS if obj == DOOR else OBJECT_SYMBOLS
    key = state if obj == DOOR else obj
    if key not in symbols:
        raise ValueError(
            f"MiniGrid cell (object {obj}, state {state}) has no symbol; this renderer knows the objects of "
            f"minigrid 3.x (OBJECT_TO_IDX 0-10). Extend OBJECT_SYMBOLS in {__name__} for a newer minigrid."
        )
    return symbols[key]


def minigrid_view(obs: dict[str, Any]) -> str:
    """``facing D`` and the egocentric view as a grid of symbols.

    Args:
        obs: MiniGrid's observation: ``image`` of shape ``(view, view, 3)`` indexed ``[x, y, channel]``
            (x across, y from the farthest row to the agent's), and ``direction`` in 0-3.

    Returns:
        ``"facing east\\n# # G ...\\n..."``: ``view`` rows of ``view`` symbols.
    """
    image = np.asarray(obs["image"])
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"MiniGrid's image must have shape (view, view, 3), got {image.shape}.")
    direction = int(obs["direction"])
    if direction not in range(len(DIRECTIONS)):
        raise ValueError(f"MiniGrid's direction must be 0-3, got {direction}.")
    rows = [
        [_cell(int(image[x, y, 0]), int(image[x, y, 2])) for x in range(image.shape[0])]
        for y in range(image.shape[1])
    ]
    return f"facing {DIRECTIONS[direction]}\n{render_grid(rows)}"


#: Every word and symbol the renderer can write (the adapter adds these to the tokenizer's vocabulary).
minigrid_view.vocabulary = ["facing", *DIRECTIONS, *OBJECT_SYMBOLS.values(), *DOOR_SYMBOLS.values()]
