"""``group_filter``: the collect-more loop on a fake collector (its cap, its order, its seeds), the extra
collections' seeds, and real tiny runs with each rule whose logged counts are recomputed from the rollouts."""

from __future__ import annotations

import shutil
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from real_runs import assert_same_metrics, history, policy_state
from tiny_sizes import MOVES_AT_ONCE, TINY

from gigpo_lab.algorithm.group_filter import NonConstant, TopStd
from gigpo_lab.batch import StepBatch
from gigpo_lab.config_paths import compose_config
from gigpo_lab.rollout.collector import Collector
from gigpo_lab.train import train
from gigpo_lab.training import module as module_mod
from gigpo_lab.training.group_filtering import collect_filtered, take_groups
from gigpo_lab.training.seeds import extra_group_seeds

FILTER_KEYS = ("rollout/groups_dropped", "rollout/groups_refilled", "rollout/extra_collections")


def fake_part(returns: list[list[float]], width: int = 1) -> StepBatch:
    """A collection of len(returns) groups, one step per trajectory, whose reward is the trajectory's return;
    responses ``width`` tokens wide (token k of trajectory t: 100 * t + k)."""
    b, g = len(returns), len(returns[0])
    flat = torch.tensor([r for grp in returns for r in grp])
    n = b * g
    traj = torch.arange(n)
    return StepBatch(
        rewards=flat.float(),
        group_ids=traj // g,
        traj_ids=traj,
        step_ids=torch.zeros(n, dtype=torch.long),
        anchor_ids=torch.zeros(n, dtype=torch.long),
        invalid=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        anchor_texts=[f"s{r}" for r in flat.tolist()],
        next_anchor_texts=["x"] * n,
        prompt_ids=traj.unsqueeze(1),
        prompt_mask=torch.ones(n, 1, dtype=torch.bool),
        response_ids=100 * traj.unsqueeze(1) + torch.arange(width),
        response_mask=torch.ones(n, width, dtype=torch.bool),
        old_logprobs=torch.zeros(n, width),
        extras={
            "success": flat > 0,
            "returns": flat.float(),
            "lengths": torch.ones(n, dtype=torch.long),
            "traj_group": traj // g,
            "env_failed": torch.zeros(n, dtype=torch.bool),
            "samples": [],
        },
    )


class FakeCollector:
    """Hands out the given collections in turn and records the seeds it was asked for."""

    def __init__(self, parts: list[list[list[float]]]):
        self.parts, self.seeds = parts, []
        self.groups, self.group_size = len(parts[0]), len(parts[0][0])

    def collect(self, seeds, generator):
        self.seeds.append(list(seeds))
        part = fake_part(
            self.parts[len(self.seeds) - 1], width=len(self.seeds)
        )  # widths differ by collection
        n = float(len(part))
        return part, {
            "rollout/env_steps": n,
            "rollout/episodes": n,
            "rollout/success_rate": float(part.extras["success"].float().mean()),
        }


def seeds_of(c: int) -> list[int]:
    return [1000 * c + b for b in range(3)]


def test_the_cap_stops_the_loop_and_the_earliest_dropped_groups_fill_the_batch():
    flat = [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]  # every group constant
    collector = FakeCollector([flat] * 5)
    batch, m = collect_filtered(
        collector, seeds_of, NonConstant(max_collections=3), torch.Generator(), pad_id=0
    )
    assert collector.seeds == [seeds_of(0), seeds_of(1), seeds_of(2)]  # 3 collections, then the cap
    assert m["rollout/extra_collections"] == 2 and m["rollout/groups_dropped"] == 9
    assert m["rollout/groups_refilled"] == 3 and m["rollout/env_steps"] == 18  # every collected step counts
    assert batch.extras["returns"].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]  # the first collection's groups
    assert batch.response_ids[:, 0].tolist() == [0, 100, 200, 300, 400, 500]


def test_the_loop_stops_once_enough_groups_pass_and_keeps_exactly_b_in_collection_order():
    first = [[0.0, 0.0], [0.0, 1.0], [3.0, 3.0]]  # one passing group: (0, 1)
    second = [[5.0, 6.0], [1.0, 1.0], [7.0, 9.0]]  # two more: (1, 0), (1, 2); (1, 2) is surplus
    collector = FakeCollector([first, second, first])
    batch, m = collect_filtered(
        collector, seeds_of, NonConstant(max_collections=10), torch.Generator(), pad_id=-1
    )
    assert len(collector.seeds) == 2
    assert m["rollout/extra_collections"] == 1 and m["rollout/groups_dropped"] == 3
    assert m["rollout/groups_refilled"] == 0
    assert batch.extras["returns"].tolist() == [0.0, 1.0, 5.0, 6.0, 7.0, 9.0]
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2, 2] and batch.traj_ids.tolist() == list(range(6))
    # collections of different response widths: the first one's responses right-padded with pad_id
    assert batch.response_ids.tolist()[:2] == [[200, -1], [300, -1]]
    assert batch.response_mask.sum(1).tolist() == [1, 1, 2, 2, 2, 2]
    assert batch.anchor_ids.tolist() == [0, 1, 2, 3, 4, 5]  # interned anew over the chosen rows
    from gigpo_lab.config_paths import config_root

    doc = " ".join((config_root() / "docs" / "ALGORITHMS.md").read_text().split())
    assert "the batch is [0, 1], [5, 6], [7, 9], with `groups_dropped` 3 and `extra_collections` 1" in doc


def test_top_std_keeps_its_share_of_one_collection_and_never_collects_more():
    collector = FakeCollector([[[1.0, 1.0], [0.0, 1.0], [0.0, 3.0], [2.0, 2.5]]])
    batch, m = collect_filtered(collector, seeds_of, TopStd(share=0.5), torch.Generator(), pad_id=0)
    assert len(collector.seeds) == 1 and m["rollout/extra_collections"] == 0
    assert m["rollout/groups_dropped"] == 2 and m["rollout/groups_refilled"] == 0
    assert batch.extras["returns"].tolist() == [0.0, 1.0, 0.0, 3.0]  # stds 0.71 and 2.12, in group order


def test_take_groups_refuses_unsorted_picks():
    with pytest.raises(ValueError, match="sorted"):
        take_groups([fake_part([[0.0, 1.0], [2.0, 3.0]])], [(0, 1), (0, 0)], 2, 0)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 50),
    groups=st.integers(1, 8),
    cap=st.integers(2, 6),
    shards=st.integers(1, 30),
)
def test_extra_seeds_are_disjoint_from_every_first_collection_and_each_other(seed, groups, cap, shards):
    first = {seed * 10_000_000 + s * groups + b for s in range(shards) for b in range(groups)}
    extra = [
        x for s in range(shards) for c in range(1, cap) for x in extra_group_seeds(seed, s, groups, c, cap)
    ]
    assert len(set(extra)) == len(extra) == shards * (cap - 1) * groups
    assert not first & set(extra)


# ----------------------------------------------------------------- real tiny runs
@pytest.fixture
def spied(monkeypatch):
    """Records each ``Collector.collect`` call's per-trajectory returns and row count, and each batch that
    ``collect_filtered`` hands the module (with the number of collections made by then)."""
    calls: list[tuple[torch.Tensor, torch.Tensor, int]] = []
    batches: list[tuple[StepBatch, int]] = []
    collect = Collector.collect

    def spy_collect(self, seeds, generator):
        batch, metrics = collect(self, seeds, generator)
        calls.append((batch.extras["returns"].clone(), batch.extras["traj_group"].clone(), len(batch)))
        return batch, metrics

    def spy_filtered(*args, **kwargs):
        batch, metrics = collect_filtered(*args, **kwargs)
        batches.append((batch, len(calls)))
        return batch, metrics

    monkeypatch.setattr(Collector, "collect", spy_collect)
    monkeypatch.setattr(module_mod, "collect_filtered", spy_filtered)
    return calls, batches


def _run(tmp_path, empty_mlflow_store, name: str, *extra: str) -> str:
    shutil.copyfile(empty_mlflow_store, tmp_path / f"{name}.db")
    uri = f"sqlite:///{tmp_path / f'{name}.db'}"
    sizes = ["env=taxi", "rollout.groups=4", "trainer.eval_every=0", MOVES_AT_ONCE]  # taxi: mixed groups
    train(compose_config([*TINY, *sizes, f"output_dir={tmp_path / name}", f"tracking.uri={uri}", *extra]))
    return uri


def _groups(returns: torch.Tensor, traj_group: torch.Tensor) -> list[list[float]]:
    out: dict[int, list[float]] = {}
    for r, g in zip(returns.tolist(), traj_group.tolist(), strict=True):
        out.setdefault(g, []).append(r)
    return [out[g] for g in sorted(out)]


def test_nonconstant_counts_match_the_rollouts(tmp_path, empty_mlflow_store, spied):
    calls, batches = spied
    uri = _run(
        tmp_path, empty_mlflow_store, "nonconstant", "group_filter=nonconstant", "trainer.iterations=3"
    )
    dropped, extra = history(uri, "rollout/groups_dropped"), history(uri, "rollout/extra_collections")
    refilled, steps = history(uri, "rollout/groups_refilled"), history(uri, "rollout/env_steps")
    assert len(batches) == len(dropped) == 3
    start = 0
    for it, (batch, end) in enumerate(batches):
        mine = calls[start:end]
        constant = [len(set(g)) == 1 for r, tg, _ in mine for g in _groups(r, tg)]
        assert dropped[it] == (it, float(sum(constant)))
        assert extra[it] == (it, float(len(mine) - 1))
        assert steps[it] == (it, float(sum(n for _, _, n in mine)))  # dropped groups' steps count too
        kept = _groups(batch.extras["returns"], batch.extras["traj_group"])
        assert len(kept) == 4  # always B groups
        assert sum(len(set(g)) == 1 for g in kept) == refilled[it][1]  # constant only when refilled
        passing = [g for r, tg, _ in mine for g in _groups(r, tg) if len(set(g)) > 1]
        assert kept[: len(kept) - int(refilled[it][1])] == passing[:4]  # the first B passing, in order
        start = end
    assert sum(v for _, v in dropped) > 0  # the filter had something to drop
    assert history(uri, "rollout/flat_groups") == [(i, refilled[i][1] / 4) for i in range(3)]


def test_top_std_keeps_the_groups_of_largest_std(tmp_path, empty_mlflow_store, spied):
    calls, batches = spied
    uri = _run(tmp_path, empty_mlflow_store, "top_std", "group_filter=top_std", "group_filter.share=0.5")
    assert len(calls) == len(batches) == 2  # one collection an iteration
    for (returns, traj_group, _), (batch, _) in zip(calls, batches, strict=True):
        stds = sorted((statistics.stdev(g) for g in _groups(returns, traj_group)), reverse=True)
        kept = [statistics.stdev(g) for g in _groups(batch.extras["returns"], batch.extras["traj_group"])]
        assert sorted(kept, reverse=True) == pytest.approx(stds[:2])
    assert history(uri, "rollout/groups_dropped") == [(0, 2.0), (1, 2.0)]
    assert history(uri, "rollout/extra_collections") == [(0, 0.0), (1, 0.0)]


def test_none_collects_once_and_logs_no_filter_metric(tmp_path, empty_mlflow_store, spied):
    calls, batches = spied
    uri = _run(tmp_path, empty_mlflow_store, "none")
    assert len(calls) == 2 and batches == []  # the plain collection, the loop never entered
    assert all(history(uri, key) == [] for key in FILTER_KEYS)


def test_a_run_resumed_under_a_filter_repeats_the_uninterrupted_run(tmp_path, empty_mlflow_store):
    """The extra collections' seeds derive from the run seed, the iteration and the collection alone: a run
    resumed from iteration 0's checkpoint ends with the uninterrupted run's metrics and weights."""
    sizes = [
        "env=taxi",
        "rollout.groups=4",
        "trainer.eval_every=0",
        MOVES_AT_ONCE,
        "group_filter=nonconstant",
    ]
    sizes += ["trainer.iterations=3"]
    runs = {}
    for name, extra in (("a", []), ("b", [f"ckpt_path={tmp_path / 'a' / 'checkpoints' / 'iter0000.ckpt'}"])):
        if name == "a":
            shutil.copyfile(empty_mlflow_store, tmp_path / "a.db")
        else:
            shutil.copy(tmp_path / "a.db", tmp_path / "b.db")  # the same store: the checkpoint names its run
        uri = f"sqlite:///{tmp_path / f'{name}.db'}"
        cfg = compose_config([*TINY, *sizes, f"output_dir={tmp_path / name}", f"tracking.uri={uri}", *extra])
        runs[name] = train(cfg)
    assert runs["a"]["rollout/extra_collections"] >= 0 and "rollout/groups_dropped" in runs["b"]
    assert_same_metrics(runs["b"], runs["a"])
    a, b = (policy_state(tmp_path / n / "checkpoints" / "last.ckpt") for n in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)
