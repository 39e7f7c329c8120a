"""The count-based novelty bonus (``exploration=count``): counts and bonus against a hand-computed oracle, the
next-state anchors the real collector reports, and real Lightning runs (off = unchanged, on = logged,
checkpointed and resumed)."""

from __future__ import annotations

import math
from collections import Counter
from functools import partial

import advantage_oracle as oracle
import gymnasium as gym
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from real_runs import assert_same_metrics, history, policy_state, run_cfg
from tiny_sizes import MOVES_AT_ONCE

from gigpo_lab.algorithm.exploration import CountBonus, NoBonus, first_visits, intrinsic_advantages
from gigpo_lab.batch import StepBatch
from gigpo_lab.config_paths import compose_config
from gigpo_lab.envs import make_env
from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.rollout import build_torch_engine
from gigpo_lab.rollout.collector import Collector
from gigpo_lab.train import train


def _batch(next_anchors: list[str], rewards: list[float] | None = None) -> StepBatch:
    n = len(next_anchors)
    r = torch.tensor(rewards if rewards is not None else [0.0] * n, dtype=torch.float32)
    zeros = torch.zeros(n, dtype=torch.long)
    return StepBatch(rewards=r, group_ids=zeros, traj_ids=zeros, next_anchor_texts=next_anchors)


def test_counts_and_bonus_match_a_hand_computed_oracle():
    bonus = CountBonus(beta=0.5, first_visit=False, own_advantage=False)
    batch = _batch(["a", "b", "a"], [1.0, -1.0, 0.0])
    metrics = bonus(batch).metrics
    # after this batch N(a) = 2, N(b) = 1: the bonus is computed with the batch's own rows counted
    expected = [1.0 + 0.5 / math.sqrt(2), -1.0 + 0.5, 0.5 / math.sqrt(2)]
    assert batch.rewards.dtype == torch.float32
    assert batch.rewards.tolist() == pytest.approx(expected, abs=1e-7)
    assert metrics == pytest.approx(
        {
            "rollout/novelty_bonus": (0.5 / math.sqrt(2) * 2 + 0.5) / 3,
            "rollout/distinct_states": 2.0,
            "rollout/new_states": 2.0,
            "rollout/novelty_beta": 0.5,
        }
    )
    second = _batch(["a", "c"])
    metrics = bonus(second).metrics  # N(a) = 3, N(c) = 1
    assert second.rewards.tolist() == pytest.approx([0.5 / math.sqrt(3), 0.5], abs=1e-7)
    assert metrics["rollout/distinct_states"] == 3.0 and metrics["rollout/new_states"] == 1.0


def _episodes(trajectories: list[list[str]], order: list[int] | None = None) -> StepBatch:
    """Rows of trajectories given as state lists [s0, s1, ..., sT] (row t: anchor s_t, next anchor s_t+1),
    in ``order`` (default: as built)."""
    anchors, nxt, traj, step = [], [], [], []
    for j, states in enumerate(trajectories):
        for t in range(len(states) - 1):
            anchors.append(states[t])
            nxt.append(states[t + 1])
            traj.append(j)
            step.append(t)
    order = order if order is not None else list(range(len(nxt)))
    batch = _batch([nxt[i] for i in order])
    batch.traj_ids = torch.tensor([traj[i] for i in order])
    batch.step_ids = torch.tensor([step[i] for i in order])
    batch.anchor_texts = [anchors[i] for i in order]
    return batch


def test_first_visit_pays_only_steps_into_states_new_to_the_episode():
    # traj 0: s0 -> s1 -> s0 (back to its reset state) -> s2 -> s2 (an invalid word stays); traj 1: s0 -> s2
    batch = _episodes([["s0", "s1", "s0", "s2", "s2"], ["s0", "s2"]], order=[4, 2, 0, 3, 1])
    CountBonus(beta=2.0, own_advantage=False)(
        batch
    )  # first_visit is the default; after the batch N(s1)=1, N(s0)=1, N(s2)=3
    by_row = {0: 2.0, 1: 0.0, 2: 2.0 / math.sqrt(3), 3: 0.0, 4: 2.0 / math.sqrt(3)}
    assert batch.rewards.tolist() == pytest.approx([by_row[i] for i in [4, 2, 0, 3, 1]], abs=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("abcde"), min_size=2, max_size=10), min_size=1, max_size=5),
    st.randoms(),
)
def test_first_visits_count_the_distinct_new_states_of_each_episode(trajectories, rng):
    n = sum(len(t) - 1 for t in trajectories)
    order = list(range(n))
    rng.shuffle(order)
    batch = _episodes(trajectories, order)
    flags = first_visits(batch)
    for j, states in enumerate(trajectories):
        assert flags[batch.traj_ids == j].sum().item() == len(set(states[1:]) - {states[0]})


def test_no_bonus_leaves_the_rewards_and_logs_nothing():
    batch = _batch(["a", "b"], [0.25, -1.0])
    before = batch.rewards
    out = NoBonus()(batch)
    assert out.metrics == {} and out.intrinsic_advantages is None and batch.rewards is before


@pytest.mark.parametrize("beta", [-0.1, math.inf, math.nan, "x"])
def test_a_bad_beta_is_refused_with_its_key(beta):
    with pytest.raises(ValueError, match="exploration.beta"):
        CountBonus(beta=beta)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=12), min_size=1, max_size=6),
    beta=st.floats(min_value=0.01, max_value=10.0),
)
def test_bonus_is_beta_over_the_root_of_the_running_count(batches, beta):
    """Invariants over any sequence of batches: the counts are the running multiset of next states, each row's
    bonus is beta / sqrt(its state's count after its batch), in (0, beta], and a state's bonus never grows."""
    bonus, oracle, last = CountBonus(beta=beta, first_visit=False, own_advantage=False), Counter(), {}
    for anchors in batches:
        batch = _batch(anchors)
        bonus(batch)
        oracle.update(anchors)
        want = [beta / math.sqrt(oracle[a]) for a in anchors]
        assert batch.rewards.tolist() == pytest.approx(want, rel=1e-6)
        assert all(0 < b <= beta * (1 + 1e-6) for b in batch.rewards.tolist())
        for a, b in zip(anchors, batch.rewards.tolist(), strict=True):
            assert b <= last.get(a, math.inf) * (1 + 1e-6)
            last[a] = b
    assert sum(bonus.counts.values()) == sum(len(b) for b in batches)
    assert len(bonus.counts) == len(oracle)


@pytest.mark.parametrize("key", ["anneal", "anneal_env_steps"])
@pytest.mark.parametrize("value", [-1, 2.5, "3", True])
def test_a_bad_anneal_is_refused_with_its_key(key, value):
    with pytest.raises(ValueError, match=f"exploration.{key}"):
        CountBonus(**{key: value})


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.sampled_from("abcd"), min_size=1, max_size=6), min_size=1, max_size=8),
    beta=st.floats(min_value=0.01, max_value=10.0),
    anneal=st.integers(min_value=0, max_value=6),
    anneal_env_steps=st.one_of(st.none(), st.integers(min_value=0, max_value=30)),
)
def test_annealing_scales_the_bonus_linearly_down_to_zero(batches, beta, anneal, anneal_env_steps):
    """Collection c, after s earlier step rows, pays what a constant-beta bonus pays times
    max(0, 1 - max(c/K, s/S)) (a clock that is 0 or None left out; neither: times 1), so zero once either
    budget is spent, while the counts go on exactly as without annealing."""
    annealed = CountBonus(
        beta=beta, first_visit=False, anneal=anneal, anneal_env_steps=anneal_env_steps, own_advantage=False
    )
    constant = CountBonus(beta=beta, first_visit=False, own_advantage=False)
    fade_c, fade_s = anneal, anneal_env_steps or 0
    rows_before = 0
    for c, anchors in enumerate(batches):
        a, b = _batch(anchors), _batch(anchors)
        metrics = annealed(a).metrics
        constant(b)
        clocks = [c / fade_c] if fade_c else []
        clocks += [rows_before / fade_s] if fade_s else []
        scale = max(0.0, 1.0 - max(clocks)) if clocks else 1.0
        rows_before += len(anchors)
        assert metrics["rollout/novelty_beta"] == pytest.approx(beta * scale)
        assert a.rewards.tolist() == pytest.approx(
            [scale * v for v in b.rewards.tolist()], rel=1e-6, abs=1e-12
        )
        if (fade_c and c >= fade_c) or (fade_s and rows_before - len(anchors) >= fade_s):
            assert a.rewards.tolist() == [0.0] * len(anchors)
    assert annealed.counts == constant.counts and annealed.collections == len(batches)


def test_the_default_anneals_over_the_run_budget_whichever_ends_it():
    from hydra.utils import instantiate

    default = instantiate(compose_config([]).exploration)
    assert (default.beta, default.first_visit, default.anneal, default.anneal_env_steps) == (0.5, True, 40, 0)
    assert default.own_advantage is True  # the measured default (docs/WHY_RUNS_FAIL.md)
    budget = instantiate(compose_config(["trainer.iterations=90", "trainer.max_env_steps=7000"]).exploration)
    assert (budget.anneal, budget.anneal_env_steps) == (90, 7000)
    constant = instantiate(compose_config(["exploration.anneal=0"]).exploration)
    assert constant.current_beta() == 0.5 and constant.progress() == 0.0


@settings(max_examples=150, deadline=None)
@given(oracle.batches(), st.sampled_from([0.95, 0.0, 1.0, 0.5]))
def test_the_intrinsic_stream_is_the_whitened_bonus_to_go_against_the_loop_oracle(rows, gamma):
    """Each row's reward stands for its bonus; groups, anchors, invalid flags and cut episodes are present and
    must not matter. 0.95 is the default gamma, and what no gamma argument gives."""
    cols = oracle.columns(rows)
    batch = StepBatch(**{k: v for k, v in cols.items() if k not in ("anchor_texts",)})
    got = intrinsic_advantages(cols["rewards"], batch, gamma)
    assert got.tolist() == pytest.approx(oracle.intrinsic_stream(rows, gamma), rel=1e-6, abs=1e-6)
    if gamma == 0.95:
        assert torch.equal(intrinsic_advantages(cols["rewards"], batch), got)


def test_the_stream_discount_is_composed_and_checked():
    from hydra.utils import instantiate

    assert compose_config([]).exploration.gamma == 0.95
    assert instantiate(compose_config(["exploration.gamma=0.5"]).exploration).gamma == 0.5
    with pytest.raises(ValueError, match=r"exploration.gamma=1.5 is outside \[0.0, 1.0\]"):
        CountBonus(gamma=1.5)


def _own_group(batch):
    """The same episodes again, fresh (a new bonus counts them from 0)."""
    fresh = _episodes([["s", "a", "b"], ["s", "a", "a"]])
    fresh.group_ids = torch.zeros(len(fresh), dtype=torch.long)
    return fresh


def test_with_its_own_advantage_the_bonus_leaves_the_rewards_and_adds_beta_times_the_stream():
    # one group: traj 0 finds a, b (new); traj 1 finds a, then stays in a (no new state the second time)
    batch = _episodes([["s", "a", "b"], ["s", "a", "a"]])
    batch.group_ids = torch.zeros(len(batch), dtype=torch.long)
    rewards = batch.rewards.clone()
    out = CountBonus(beta=0.5, own_advantage=True)(batch)
    metrics = out.metrics
    assert torch.equal(batch.rewards, rewards)
    # N(a) = 3, N(b) = 1, first visits only: the row bonuses are [1/sqrt(3), 1] and [1/sqrt(3), 0];
    # the bonus-to-go at gamma 0.95: [1/sqrt(3) + 0.95, 1] and [1/sqrt(3), 0], then whitened over the 4 rows
    to_go = [1 / math.sqrt(3) + 0.95, 1.0, 1 / math.sqrt(3), 0.0]
    mean = sum(to_go) / 4
    std = math.sqrt(sum((b - mean) ** 2 for b in to_go) / 3)
    want = [0.5 * (b - mean) / (std + 1e-6) for b in to_go]
    assert out.intrinsic_advantages.tolist() == pytest.approx(want, rel=1e-9)
    assert want[0] > 0 > want[2]  # the trajectory that found b is pushed up, from its first state on
    assert metrics["rollout/intrinsic_adv_abs"] == pytest.approx(sum(map(abs, want)) / 4)
    estimator = torch.tensor([1.0, -1.0, 0.25, 0.0], dtype=torch.float32)
    added = out.add_to(estimator)
    assert added.dtype == torch.float32
    # the relative dose: the stream times the estimator's own spread, the unbiased std of [1, -1, 0.25, 0]:
    # mean 1/16, squared deviations summing to 2.046875, over 3
    own_std = math.sqrt(2.046875 / 3)
    assert added.tolist() == pytest.approx(
        [e + own_std * w for e, w in zip(estimator.tolist(), want, strict=True)], rel=1e-6
    )
    assert out.dose(estimator) == {
        "adv/own_std": pytest.approx(own_std),
        "adv/stream_ratio": pytest.approx(0.5, rel=1e-5),  # beta: std(A_int) is 1 up to its 1e-6 eps
    }
    fixed = CountBonus(beta=0.5, own_advantage=True, relative_dose=False)(_own_group(batch))
    assert fixed.add_to(estimator).tolist() == pytest.approx(
        [e + w for e, w in zip(estimator.tolist(), want, strict=True)], rel=1e-6
    )
    flat = torch.zeros(4)  # no own signal: the floor, the same stream whatever the estimator
    assert out.add_to(flat).tolist() == pytest.approx([0.01 * w for w in want], rel=1e-6)
    assert "adv/stream_ratio" not in out.dose(flat)
    assert NoBonus()(batch).add_to(estimator) is estimator


def test_the_counts_survive_a_weights_only_checkpoint(tmp_path):
    bonus = CountBonus(beta=1.0, first_visit=False, anneal=4, own_advantage=False)
    bonus(_batch(["s1", "s2", "s1"]))
    torch.save({"exploration": bonus.state()}, tmp_path / "c.pt")
    restored = CountBonus(beta=1.0, first_visit=False, anneal=4, own_advantage=False)
    restored.load(torch.load(tmp_path / "c.pt", weights_only=True)["exploration"])
    a, b = _batch(["s1", "s3"]), _batch(["s1", "s3"])
    bonus(a)
    restored(b)
    assert torch.equal(a.rewards, b.rewards) and restored.counts == bonus.counts
    assert restored.collections == bonus.collections == 2  # the annealing clocks came back too
    assert restored.env_steps == bonus.env_steps == 5


class AfterLog(gym.Wrapper):
    """Records the anchor each step of this env reported (the state after the step)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.after: list[str] = []

    def reset(self, **kwargs):
        self.after = []
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.after.append(info["anchor"])
        return obs, reward, terminated, truncated, info


def test_the_collector_reports_the_anchor_after_every_step():
    env_fn = partial(lambda: AfterLog(make_env("gigpo_lab/FrozenLake-v0", max_turns=6, random_map=True)))
    policy = build_tiny_policy(env_fn().unwrapped.vocabulary(), d_model=32, seed=0)
    collector = Collector(env_fn, policy, build_torch_engine(policy), groups=2, group_size=3)
    batch, _ = collector.collect([3, 4], torch.Generator().manual_seed(0))
    nxt = batch.next_anchor_texts
    assert len(nxt) == len(batch)
    for traj, env in enumerate(collector.envs):
        rows = (batch.traj_ids == traj).nonzero().squeeze(1).tolist()  # in step order
        assert [nxt[i] for i in rows] == env.after
        # inside a trajectory the state after step t is the anchor of step t + 1
        assert [nxt[i] for i in rows[:-1]] == [batch.anchor_texts[i] for i in rows[1:]]


def test_on_by_default_and_beta_zero_trains_exactly_like_no_bonus(tiny_overrides, tmp_path):
    assert compose_config([]).exploration._target_ == "gigpo_lab.algorithm.exploration.CountBonus"
    off = train(run_cfg(tiny_overrides, tmp_path, "off", "exploration=none"))
    zero = train(run_cfg(tiny_overrides, tmp_path, "zero", "exploration=count", "exploration.beta=0"))
    assert "rollout/novelty_bonus" not in off and zero["rollout/novelty_bonus"] == 0.0
    assert_same_metrics(zero, off)
    a, b = (
        policy_state(tmp_path / "off/checkpoints/last.ckpt"),
        policy_state(tmp_path / "zero/checkpoints/last.ckpt"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_with_the_bonus_logs_it_keeps_env_metrics_and_resumes_its_counts(tiny_overrides, tmp_path):
    # annealed over 3 collections, so that the resumed run must also restore the annealing clock
    # the bonus on the rewards (own_advantage=false), so that the estimator's own statistics show it
    tiny_overrides = [*tiny_overrides, MOVES_AT_ONCE]
    on = (
        "exploration=count",
        "exploration.beta=0.5",
        "exploration.anneal=3",
        "exploration.own_advantage=false",
        "trainer.iterations=4",
    )
    straight = train(run_cfg(tiny_overrides, tmp_path, "a", *on))
    train(run_cfg(tiny_overrides, tmp_path, "off", "exploration=none", "trainer.iterations=1"))
    uri_a, uri_off = f"sqlite:///{tmp_path / 'a'}.db", f"sqlite:///{tmp_path / 'off'}.db"
    # iteration 0 samples from the same initial policy: the env's own return and success are unchanged by
    # the bonus, while the advantages the estimator computed differ
    for key in ("rollout/return", "rollout/success_rate", "rollout/invalid_rate"):
        assert history(uri_a, key)[0] == history(uri_off, key)[0], key
    assert history(uri_a, "adv/std")[0] != history(uri_off, "adv/std")[0]
    bonuses = [v for _, v in sorted(history(uri_a, "rollout/novelty_bonus"))]
    # beta falls 0.5, 1/3, 1/6, 0 (a tiny run may find no new state in some iteration, so the bonus itself
    # is checked only where it must be positive or zero)
    assert bonuses[0] > 0 and bonuses[3] == 0.0
    betas = [v for _, v in sorted(history(uri_a, "rollout/novelty_beta"))]
    assert betas == pytest.approx([0.5, 1 / 3, 1 / 6, 0.0])
    distinct = [v for _, v in history(uri_a, "rollout/distinct_states")]
    assert distinct == sorted(distinct) and distinct[0] >= 1
    ckpt = torch.load(tmp_path / "a/checkpoints/last.ckpt", weights_only=True)
    counts = ckpt["gigpo_lab"]["exploration"]["counts"]
    assert sum(counts.values()) == straight["rollout/env_steps_total"]  # every step row counted once
    assert len(counts) == straight["rollout/distinct_states"]

    # 2 iterations, then resumed to 4: the counts come back from the checkpoint, so the run is the same
    half = [o for o in on if not o.startswith("trainer.iterations")]
    train(run_cfg(tiny_overrides, tmp_path, "b", *half, "trainer.iterations=2"))
    resumed = train(
        run_cfg(
            tiny_overrides,
            tmp_path,
            "b",
            *on,
            f"ckpt_path={tmp_path / 'b' / 'checkpoints' / 'last.ckpt'}",
        )
    )
    for key in (
        "rollout/novelty_bonus",
        "rollout/novelty_beta",
        "rollout/distinct_states",
        "adv/std",
        "train/loss",
    ):
        assert resumed[key] == straight[key], key


def test_with_its_own_advantage_the_estimator_sees_the_env_rewards(tiny_overrides, tmp_path):
    """Real runs: at iteration 0 (same policy, same rollout) the estimator's own statistics are exactly those of
    exploration=none, while the update differs; beta 0 with the bonus in the rewards trains exactly like none."""
    tiny_overrides = [*tiny_overrides, MOVES_AT_ONCE]
    own = ("exploration=count", "exploration.own_advantage=true")
    train(run_cfg(tiny_overrides, tmp_path, "own", *own, "env.max_turns=8"))
    train(run_cfg(tiny_overrides, tmp_path, "off", "exploration=none", "env.max_turns=8"))
    uri_own, uri_off = f"sqlite:///{tmp_path / 'own'}.db", f"sqlite:///{tmp_path / 'off'}.db"
    for key in ("adv/mean", "adv/std", "rollout/return"):
        assert history(uri_own, key)[0] == history(uri_off, key)[0], key
    assert history(uri_own, "rollout/intrinsic_adv_abs")[0][1] > 0
    assert history(uri_own, "train/loss")[0] != history(uri_off, "train/loss")[0]
    # beta 0 with the bonus in the rewards (the other path; the default's is checked above) adds nothing
    in_rewards = ("exploration=count", "exploration.own_advantage=false", "exploration.beta=0")
    zero = train(run_cfg(tiny_overrides, tmp_path, "zero", *in_rewards, "env.max_turns=8"))
    off = train(run_cfg(tiny_overrides, tmp_path, "off2", "exploration=none", "env.max_turns=8"))
    assert_same_metrics(zero, off)


def test_reward_clipping_leaves_frozenlake_bit_exact_and_caps_cliffwalkings_falls(tiny_overrides, tmp_path):
    """Real runs: FrozenLake's rewards lie in [0, 1], so the default clip trains exactly like none; on
    CliffWalking (-1 a step, -100 a fall) the estimator sees clipped rewards while the logged return is the env's."""
    clipped = train(run_cfg(tiny_overrides, tmp_path, "clipped"))
    unclipped = train(run_cfg(tiny_overrides, tmp_path, "unclipped", "trainer.reward_clip=null"))
    assert_same_metrics(clipped, unclipped)
    cliff = (
        "env=cliffwalking",
        "env.max_turns=30",
        "rollout.groups=4",
        "exploration=none",
        "trainer.iterations=1",
    )
    train(run_cfg(tiny_overrides, tmp_path, "cc", *cliff))
    train(run_cfg(tiny_overrides, tmp_path, "cu", *cliff, "trainer.reward_clip=null"))
    uri_c, uri_u = f"sqlite:///{tmp_path / 'cc'}.db", f"sqlite:///{tmp_path / 'cu'}.db"
    # one seed's first rollout: the same episodes, some of them with a fall (the return is below -30)
    assert history(uri_c, "rollout/return") == history(uri_u, "rollout/return")
    assert history(uri_u, "rollout/return")[0][1] < -30
    # the estimator's advantages of clipped rewards (every step -1) are far smaller than with -100 falls
    assert history(uri_c, "adv/std")[0][1] < history(uri_u, "adv/std")[0][1] / 5
