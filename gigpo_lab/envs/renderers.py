"""Text renderers for gymnasium's toy-text envs, for the ``gym_discrete`` adapter's ``renderer`` key.

Their ``Discrete`` observations are single integers, which a word tokenizer sees as one opaque word per state.
These functions spell the state out as the factors the env itself encodes, so that a policy can share what
it learns across states. They read the observation only: no reward, no knowledge of the goal.

    env=gym_discrete env.id=CliffWalking-v1 env.renderer=gigpo_lab.envs.renderers:cliffwalking
    env=gym_discrete env.id=Taxi-v4 env.renderer=gigpo_lab.envs.renderers:taxi
    env=gym_discrete env.id=FrozenLake-v1 env.renderer=gigpo_lab.envs.renderers:frozenlake_4x4 \
        env.success_on=terminated_positive   # a hole terminates too; only the goal pays 1
"""

from __future__ import annotations

#: Taxi's four stands, in the env's index order (gymnasium's Taxi-v4 docs: Red, Green, Yellow, Blue).
TAXI_STANDS = ("red", "green", "yellow", "blue")
CLIFF_COLUMNS = 12  # CliffWalking-v1 is a 4 x 12 grid; obs = row * 12 + col
FROZENLAKE_4X4_COLUMNS = 4  # FrozenLake-v1 with map_name 4x4; obs = row * 4 + col


def _position(obs: int, columns: int) -> str:
    """``row R col C`` of a grid position index ``obs = row * columns + col``."""
    row, col = divmod(int(obs), columns)
    return f"row {row} col {col}"


def cliffwalking(obs: int) -> str:
    """``row R col C`` of CliffWalking's position index ``obs`` (row 3 holds the start, cliff and goal)."""
    return _position(obs, CLIFF_COLUMNS)


def taxi(obs: int) -> str:
    """Taxi-v4's state index decoded as gymnasium encodes it: ((row * 5 + col) * 5 + passenger) * 4 + dest,
    where passenger 0-3 waits at a stand and 4 rides in the taxi."""
    rest, dest = divmod(int(obs), 4)
    rest, passenger = divmod(rest, 5)
    row, col = divmod(rest, 5)
    where = "taxi" if passenger == 4 else TAXI_STANDS[passenger]
    return f"row {row} col {col} passenger {where} destination {TAXI_STANDS[dest]}"


def frozenlake_4x4(obs: int) -> str:
    """``row R col C`` of gymnasium FrozenLake-v1's position index ``obs`` on its 4x4 map."""
    return _position(obs, FROZENLAKE_4X4_COLUMNS)
