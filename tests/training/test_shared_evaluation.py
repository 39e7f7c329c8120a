"""The held-out evaluation shared across ranks (``gigpo_lab/training/evaluation.py``, ``distributed.py``): each
rank's share gathers into the whole table in episode order, and each episode samples from its own stream, so a
share plays its episodes exactly as one process playing them all does. Two real CPU ranks:
``tests/training/test_ddp.py::test_two_ranks_sync_gradients_split_rollouts_and_share_the_evaluation``."""

from __future__ import annotations

import pytest
import torch

from gigpo_lab.config_paths import compose_config
from gigpo_lab.rollout.held_out import COLUMNS, table_metrics
from gigpo_lab.training.distributed import episode_share, gather_episodes
from gigpo_lab.training.seeds import eval_seeds, eval_stream_seed, iteration_seed


class SimulatedRanks:
    """Rank ``rank`` of ``world`` in one process: ``all_gather`` stacks every rank's share of ``full`` (E, K),
    padded as ``gather_episodes`` pads its own, after checking that this rank's is the tensor it was given."""

    root_device = torch.device("cpu")

    def __init__(self, full: torch.Tensor, rank: int, world: int):
        self.full, self.global_rank, self.world_size = full, rank, world

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        stacked = torch.zeros(self.world_size, *tensor.shape, dtype=tensor.dtype)
        for r in range(self.world_size):
            share = self.full[episode_share(len(self.full), r, self.world_size)]
            stacked[r, : len(share)] = share
        assert torch.equal(stacked[self.global_rank], tensor)
        return stacked


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_the_shares_gather_into_the_whole_table_in_episode_order(world):
    for episodes in range(1, 10):  # fewer episodes than ranks too: a rank with an empty share
        full = torch.arange(episodes * len(COLUMNS), dtype=torch.float64).reshape(episodes, -1)
        shares = [episode_share(episodes, r, world) for r in range(world)]
        assert sorted(i for s in shares for i in s) == list(range(episodes))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        for rank, share in enumerate(shares):
            gathered = gather_episodes(full[share], episodes, SimulatedRanks(full, rank, world))
            assert torch.equal(gathered, full), (episodes, rank)


def test_the_metrics_of_a_table_by_hand():
    table = torch.tensor(
        [  # success, return, length, revisited, failed
            [1.0, 1.0, 3.0, 0.0, 0.0],
            [0.0, -1.0, 6.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 1.0],  # its env raised: out of the means, in the revisit share's count
        ],
        dtype=torch.float64,
    )
    assert table_metrics(table) == {
        "eval/success_rate": 0.5,
        "eval/revisit_rate": 1 / 3,
        "eval/return": 0.0,
        "eval/length": 4.5,
        "eval/env_errors": 1.0,
    }


def test_each_episode_has_its_own_stream_apart_from_training():
    streams = [eval_stream_seed(0, i) for i in range(1000)]
    assert len(set(streams)) == 1000
    assert not set(streams) & {iteration_seed(0, shard) for shard in range(10_000)}


def test_an_episode_plays_the_same_beside_any_other_episodes(tiny_overrides):
    """The table of 9 held-out episodes played at once equals, row for row, the rows of the shares that 2 or 3
    ranks play, so the gathered metrics are the same numbers."""
    from gigpo_lab.train import build

    # holes beside the start: a sampled move into one ends the episode, so the episodes' lengths differ
    cfg = compose_config([*tiny_overrides, "env.desc=[SH,FG]", "env.max_turns=12"])
    collector, episodes = build(cfg).collector, 9
    seeds = eval_seeds(episodes)

    def play(ids: list[int]) -> torch.Tensor:
        streams = [torch.Generator().manual_seed(eval_stream_seed(cfg.seed, i)) for i in ids]
        return collector.held_out([seeds[i] for i in ids], streams, greedy=False, temperature=1.0)

    full = play(list(range(episodes)))
    assert len(set(full[:, COLUMNS.index("length")].tolist())) > 1, "episodes that differ"
    for world in (2, 3):
        parts = torch.zeros_like(full)
        for rank in range(world):
            share = episode_share(episodes, rank, world)
            parts[share] = play(share)
        assert torch.equal(parts, full), world
