"""The MiniGrid renderer against MiniGrid's own decoding, and the minigrid_* presets on real MiniGrid envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.config_paths import compose_config
from gigpo_lab.envs.minigrid_view import DIRECTIONS, DOOR_SYMBOLS, OBJECT_SYMBOLS, minigrid_view
from gigpo_lab.policy.word_tokenizer import WordTokenizer

minigrid = pytest.importorskip("minigrid")  # a dev dependency; the skip is for a bare install only
from minigrid.core.constants import DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX  # noqa: E402
from minigrid.core.grid import Grid  # noqa: E402

#: The oracle: a symbol per MiniGrid object *name* (and door state), written from MiniGrid's docs rather than
#: from the renderer's index tables; an agent's own cell decodes to None, as MiniGrid does for empty.
SYMBOL_OF_NAME = {
    None: ".",
    "wall": "#",
    "floor": "_",
    "key": "K",
    "ball": "B",
    "box": "X",
    "goal": "G",
    "lava": "L",
}
DOOR_OF_STATE = {"open": "o", "closed": "d", "locked": "D"}
#: The compass name of each of MiniGrid's direction vectors (x to the right, y down the grid).
COMPASS = {(1, 0): "east", (0, 1): "south", (-1, 0): "west", (0, -1): "north"}
PRESETS = ("minigrid_empty", "minigrid_doorkey")


def oracle_rows(image: np.ndarray) -> list[list[str]]:
    """The view's symbols via MiniGrid's own ``Grid.decode``, indexed [y][x] as the renderer's rows are."""
    grid, seen = Grid.decode(image)
    rows = []
    for y in range(grid.height):
        row = []
        for x in range(grid.width):
            obj = grid.get(x, y)
            if not seen[x, y]:
                row.append("?")
            elif obj is not None and obj.type == "door":
                row.append(DOOR_OF_STATE["locked" if obj.is_locked else "open" if obj.is_open else "closed"])
            else:
                row.append(SYMBOL_OF_NAME[None if obj is None else obj.type])
        rows.append(row)
    return rows


def compass(vector) -> str:
    """The compass name of a MiniGrid direction vector ``(dx, dy)``."""
    return COMPASS[tuple(int(v) for v in vector)]


def where(grid: Grid, kind: str) -> np.ndarray:
    """The (x, y) of the first cell holding an object of type ``kind``."""
    return next(
        np.array((x, y))
        for x in range(grid.width)
        for y in range(grid.height)
        if getattr(grid.get(x, y), "type", None) == kind
    )


def parse(text: str) -> tuple[str, list[list[str]]]:
    head, *rows = text.split("\n")
    assert head.startswith("facing ")
    return head.removeprefix("facing "), [row.split(" ") for row in rows]


def test_the_index_tables_are_minigrids():
    """The renderer's numbers are MiniGrid's: every object and door state it names has MiniGrid's index."""
    names = {"unseen": "?", "empty": ".", "agent": "A", **{k: v for k, v in SYMBOL_OF_NAME.items() if k}}
    assert {OBJECT_TO_IDX[name]: symbol for name, symbol in names.items()} == OBJECT_SYMBOLS
    assert {STATE_TO_IDX[state]: symbol for state, symbol in DOOR_OF_STATE.items()} == DOOR_SYMBOLS
    assert DIRECTIONS == tuple(compass(DIR_TO_VEC[i]) for i in range(4))
    symbols = [*OBJECT_SYMBOLS.values(), *DOOR_SYMBOLS.values()]
    assert len(set(symbols)) == len(symbols)


@pytest.mark.parametrize(
    ("env_id", "must_meet"),
    [
        ("MiniGrid-DoorKey-5x5-v0", {"#", ".", "?", "D", "K"}),
        ("MiniGrid-Empty-Random-6x6-v0", {"#", ".", "G"}),
        ("MiniGrid-LavaGapS5-v0", {"#", ".", "?", "G", "L"}),
    ],
)
def test_the_text_is_minigrids_decoded_view_along_a_random_walk(env_id, must_meet):
    """Each rendering along seeded random walks (walls, cells out of sight, a locked door, a key, lava) equals
    MiniGrid's decode, and names the agent's heading by its direction vector."""
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    met: set[str] = set()
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        for _ in range(60):
            facing, rows = parse(minigrid_view(obs))
            assert facing == compass(env.unwrapped.dir_vec)
            assert rows == oracle_rows(obs["image"])
            met.update(symbol for row in rows for symbol in row)
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                break
    assert must_meet <= met  # the walks met these cells, so the comparison was not vacuous


def test_an_opened_door_and_a_carried_key_show():
    """DoorKey solved by hand: the locked door reads ``D`` ahead, ``o`` once toggled; the agent's own cell shows
    the key it carries."""
    env = gym.make("MiniGrid-DoorKey-5x5-v0").unwrapped
    env.reset(seed=0)
    key, door = (where(env.grid, kind) for kind in ("key", "door"))
    # stand on a free cell next to the key, facing it
    env.agent_pos, env.agent_dir = next(
        (key - DIR_TO_VEC[d], d) for d in range(4) if env.grid.get(*(key - DIR_TO_VEC[d])) is None
    )
    env.step(env.actions.pickup)
    _, rows = parse(minigrid_view(env.gen_obs()))
    assert rows[-1][3] == "K"  # the agent's cell: bottom row, middle
    env.agent_pos, env.agent_dir = door - DIR_TO_VEC[0], 0  # left of the door (the key's room), facing east
    _, rows = parse(minigrid_view(env.gen_obs()))
    assert rows[-2][3] == "D"  # the cell ahead
    env.step(env.actions.toggle)
    _, rows = parse(minigrid_view(env.gen_obs()))
    assert rows[-2][3] == "o"


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 9), st.integers(0, 3), st.data())
def test_any_view_renders_as_decoded(view, direction, data):
    """Hypothesis: any well-formed view (every object and door state) renders as MiniGrid decodes it."""
    cells = [k for k in OBJECT_SYMBOLS if k != 10] + [4]  # 10: an agent decodes as empty; 4: the door
    image = np.zeros((view, view, 3), dtype=np.uint8)
    for x in range(view):
        for y in range(view):
            obj = data.draw(st.sampled_from(cells))
            image[x, y] = (obj, 0, data.draw(st.integers(0, 2)) if obj == 4 else 0)
    facing, rows = parse(minigrid_view({"image": image, "direction": direction}))
    assert facing == compass(DIR_TO_VEC[direction])
    assert rows == oracle_rows(image)


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        ({"image": np.full((7, 7, 3), 11), "direction": 0}, "Extend OBJECT_SYMBOLS"),
        ({"image": np.array([[4, 0, 3]]).reshape(1, 1, 3), "direction": 0}, "object 4, state 3"),
        ({"image": np.ones((7, 7)), "direction": 0}, "shape (view, view, 3)"),
        ({"image": np.ones((7, 7, 3)), "direction": 4}, "direction must be 0-3"),
    ],
)
def test_a_view_it_cannot_render_is_named(obs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        minigrid_view(obs)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_cell_the_preset_can_show_is_in_the_vocabulary(preset):
    """The adapter's vocabulary holds the renderer's listed symbols, so an open door, which a random walk does
    not meet, still has its own token and never reads as ``<unk>``."""
    from hydra.utils import instantiate

    env = instantiate(compose_config([f"env={preset}"]).env)
    tokenizer = WordTokenizer(env.unwrapped.vocabulary())
    every_cell = " ".join([*OBJECT_SYMBOLS.values(), *DOOR_SYMBOLS.values()])
    for text in (every_cell, *(f"facing {d}" for d in DIRECTIONS), env.reset(seed=1)[0]):
        assert tokenizer.unk_id not in tokenizer.encode(text), text
    env.close()


@pytest.mark.parametrize("preset", PRESETS)
def test_the_preset_reaches_its_goal_as_a_success(preset):
    """Following MiniGrid's own optimal route needs the env's internals; here the agent is put in front of the
    goal and steps forward: the goal pays 1 - 0.9 t / max_steps > 0, ends the episode and counts as a success."""
    from hydra.utils import instantiate

    env = instantiate(compose_config([f"env={preset}"]).env)
    env.reset(seed=2)
    inner = env.unwrapped.inner.unwrapped
    inner.agent_pos, inner.agent_dir = (
        where(inner.grid, "goal") - DIR_TO_VEC[1],
        1,
    )  # above the goal, facing south
    _, reward, terminated, _, info = env.step("<action>forward</action>")
    assert terminated and info["success"] and 0 < reward <= 1
    env.close()
