"""The toy-text renderers against gymnasium's own decoding, and through the gym_discrete adapter."""

from __future__ import annotations

import gymnasium as gym
import pytest

from gigpo_lab.config_paths import compose_config
from gigpo_lab.envs.renderers import TAXI_STANDS, cliffwalking, frozenlake_4x4, taxi


def test_taxi_text_matches_gymnasiums_decode_for_every_state():
    env = gym.make("Taxi-v4").unwrapped
    for state in range(env.observation_space.n):
        row, col, passenger, dest = env.decode(state)
        where = "taxi" if passenger == 4 else TAXI_STANDS[passenger]
        assert taxi(state) == f"row {row} col {col} passenger {where} destination {TAXI_STANDS[dest]}"
    assert len({taxi(s) for s in range(500)}) == 500  # one text per state


def test_cliffwalking_text_names_the_position_of_every_state():
    env = gym.make("CliffWalking-v1")
    _, _ = env.reset(seed=0)
    obs, *_ = env.step(0)  # up from the start (row 3, col 0)
    assert cliffwalking(obs) == "row 2 col 0"
    assert len({cliffwalking(s) for s in range(48)}) == 48


def test_frozenlake_text_names_the_position_that_gymnasium_moves_to():
    env = gym.make("FrozenLake-v1", map_name="4x4", is_slippery=False)
    _, _ = env.reset(seed=0)
    obs, *_ = env.step(2)  # right from the start (row 0, col 0)
    assert frozenlake_4x4(obs) == "row 0 col 1"
    obs, *_ = env.step(1)  # down
    assert frozenlake_4x4(obs) == "row 1 col 1"
    assert len({frozenlake_4x4(s) for s in range(16)}) == 16


@pytest.mark.parametrize(
    ("env_id", "renderer", "names"),
    [
        ("CliffWalking-v1", "cliffwalking", "[up,right,down,left]"),
        ("Taxi-v4", "taxi", "[south,north,east,west,pickup,dropoff]"),
        ("FrozenLake-v1", "frozenlake_4x4", "[left,down,right,up]"),
    ],
)
def test_the_adapter_shows_the_rendered_state(env_id, renderer, names):
    from hydra.utils import instantiate

    cfg = compose_config(
        [
            "env=gym_discrete",
            f"env.id={env_id}",
            f"env.renderer=gigpo_lab.envs.renderers:{renderer}",
            f"env.action_names={names}",
        ]
    )
    env = instantiate(cfg.env)
    _, info = env.reset(seed=3)
    assert info["anchor"].startswith("row ")
    words = set(" ".join(env.unwrapped.vocabulary()).split())
    assert set(info["anchor"].split()) <= words  # every word of a state is in the tokenizer's vocabulary
    env.close()
