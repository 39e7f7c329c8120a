"""The no-repeat control (``env.no_repeat=true``): a number drawn every step tags the observation and the
anchor, so no state repeats within a group; there GiGPO's step groups are singletons and GiGPO equals GRPO,
on rollouts of the real env through the collector and through the functional API."""

from __future__ import annotations

import re
from functools import partial

import pytest
import torch
from advantage_oracle import batches, columns
from hydra.utils import instantiate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gigpo_lab.algorithm import build_estimator, compute_advantages
from gigpo_lab.batch import StepBatch
from gigpo_lab.config_paths import compose_config
from gigpo_lab.envs import TextActionWrapper, make_env
from gigpo_lab.envs.no_repeat import DIGITS, PREFIX, NuisanceTokenWrapper
from gigpo_lab.errors import ConfigError
from gigpo_lab.policy import build_tiny_policy
from gigpo_lab.rollout import build_torch_engine
from gigpo_lab.rollout.collector import Collector, intern_strings
from gigpo_lab.training.config_checks import validate_config

TAG = re.compile(re.escape(PREFIX) + rf"\d{{{DIGITS}}}$")
#: GiGPO's episode-level options: GRPO with the same ones is the GiGPO of singleton step groups.
EPISODE_KEYS = ("mode", "normalize_over", "invalid_action_penalty", "episode_singleton")
#: GiGPO's parameters, drawn (step_singleton stays at its default, zero).
GIGPO_PARAMS = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
        "normalize_over": st.sampled_from(["rows", "trajectories"]),
        "invalid_action_penalty": st.sampled_from([0.0, 0.1, 1.0]),
        "episode_singleton": st.sampled_from(["raw", "zero"]),
        "step_advantage_weight": st.floats(0.0, 2.0),
        "gamma": st.floats(0.0, 1.0),
    }
)


def lake(**kwargs):
    return make_env("gigpo_lab/FrozenLake-v0", max_turns=6, no_repeat=True, **kwargs)


def test_every_observation_and_anchor_gets_a_fresh_number():
    env = lake()
    obs, info = env.reset(seed=3)
    seen = [info["anchor"]]
    assert TAG.search(obs) and TAG.search(info["anchor"])
    assert obs.endswith(info["anchor"][-len(PREFIX) - DIGITS :])
    for text in ("<action>left</action>", "not an action", "<action>left</action>"):
        obs, _, _, _, info = env.step(text)  # a wall, an invalid word, a wall: the state never moves
        assert TAG.search(obs) and TAG.search(info["anchor"])
        seen.append(info["anchor"])
    assert len(set(seen)) == len(seen), "the state stayed, the anchor did not"
    assert {a[: -len(PREFIX) - DIGITS] for a in seen} == {seen[0][: -len(PREFIX) - DIGITS]}


def test_envs_reset_with_one_seed_draw_apart_and_a_wrapper_repeats_itself():
    def numbers(instance: int) -> list[str]:
        env = NuisanceTokenWrapper(make_env("gigpo_lab/FrozenLake-v0", max_turns=6), instance=instance)
        _, info = env.reset(seed=5)
        out = [info["anchor"][-DIGITS:]]
        for _ in range(3):
            out.append(env.step("left")[4]["anchor"][-DIGITS:])
        return out

    assert numbers(0) == numbers(0), "same seed, same instance: the same numbers"
    assert not set(numbers(0)) & set(numbers(1)), "the G envs of a group (one reset seed) draw apart"


def test_off_by_default_and_the_env_unchanged():
    cfg = compose_config([])
    assert cfg.env.no_repeat is False
    env = instantiate(cfg.env)
    assert type(env) is TextActionWrapper
    _, info = env.reset(seed=0)
    assert "noise" not in info["anchor"]


# the TextWorld presets generate games when built (tests/envs/test_textworld.py covers their anchors)
@pytest.mark.parametrize(
    "option",
    [
        "frozenlake",
        "frozenlake8x8",
        "cliffwalking",
        "taxi",
        "household",
        "sokoban",
        "gym_discrete",
        "minigrid_empty",
        "minigrid_doorkey",
    ],
)
def test_every_env_option_takes_it(option):
    cfg = compose_config([f"env={option}", "env.no_repeat=true"])
    validate_config(cfg)
    env = instantiate(cfg.env)
    assert isinstance(env, NuisanceTokenWrapper) and env.get_wrapper_attr("name") == cfg.env.name
    obs, info = env.reset(seed=0)
    assert TAG.search(obs) and TAG.search(info["anchor"])
    assert env.observation_space.contains(obs)
    obs, _, _, _, info = env.step(f"<action>{info['admissible_actions'][0]}</action>")
    assert TAG.search(obs) and TAG.search(info["anchor"]) and not info["invalid"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["estimator.anchor_similarity_threshold=0.9"], "set estimator.anchor_similarity_threshold=null or"),
        (
            ["env._target_=tests.cli.test_train.make_anchorless_env"],
            "set env._target_=gigpo_lab.envs.make_env",
        ),
    ],
)
def test_what_it_cannot_run_with_fails_at_compose_time_with_the_fix(overrides, message):
    cfg = compose_config(["env.no_repeat=true", *overrides])
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        validate_config(cfg)
    assert "\n" not in str(err.value)
    validate_config(compose_config(overrides))  # without the control, both run


@pytest.fixture(scope="module")
def rollout():
    """A batch of the default env (``conf/config.yaml``) with ``env.no_repeat=true``: 4 groups x 4 envs of
    20 turns, played by an untrained tiny policy through the real collector."""
    cfg = compose_config(["env.no_repeat=true"])
    env_fn = partial(instantiate, cfg.env)
    policy = build_tiny_policy(env_fn().unwrapped.vocabulary(), d_model=32, seed=0)
    collector = Collector(env_fn, policy, build_torch_engine(policy), groups=4, group_size=4)
    batch, _ = collector.collect([11, 12, 13, 14], torch.Generator().manual_seed(0))
    return batch


def estimator_params():
    grid = [{}, {"mode": "mean_std_norm"}, {"normalize_over": "trajectories"}]
    grid += [{"mode": "mean_std_norm", "normalize_over": "trajectories", "step_advantage_weight": 0.6}]
    return grid + [{"invalid_action_penalty": 1.0, "gamma": 1.0, "episode_singleton": "zero"}]


@pytest.mark.parametrize("params", estimator_params())
def test_on_real_rollouts_gigpo_equals_grpo(rollout, params):
    gigpo = build_estimator("gigpo", **params)(rollout)
    grpo = build_estimator("grpo", **{k: v for k, v in params.items() if k in EPISODE_KEYS})(rollout)
    assert gigpo.metrics["adv/singleton_frac"] == 1.0
    assert torch.equal(gigpo.advantages, grpo.advantages)


def test_the_same_rollouts_without_the_tag_repeat_states(rollout):
    """The teeth of the test above: the batch's own states, the number cut off, do repeat, and there
    GiGPO is not GRPO."""
    assert bool(rollout.invalid.any()), "invalid turns (the state stays) are in the batch"
    plain = [TAG.sub("", a) for a in rollout.anchor_texts]
    assert all(a != p for a, p in zip(rollout.anchor_texts, plain, strict=True))
    cols = {k: getattr(rollout, k) for k in ("rewards", "group_ids", "traj_ids", "step_ids", "invalid")}
    out = build_estimator("gigpo")(StepBatch(**cols, anchor_ids=intern_strings(plain)))
    assert out.metrics["adv/singleton_frac"] < 0.5
    assert not torch.equal(out.advantages, compute_advantages("grpo", **cols))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=batches(), params=GIGPO_PARAMS)
def test_with_every_anchor_unique_gigpo_equals_grpo(rows, params):
    """The functional API on any batch whose anchors never repeat within a group (what the tag makes):
    GiGPO at ``step_singleton: zero`` (the default) is GRPO with the same episode options, bit for bit."""
    cols = columns(rows)
    cols["anchor_ids"] = torch.arange(len(rows)) * 7 - 3
    gigpo = compute_advantages("gigpo", **cols, **params)
    grpo = compute_advantages("grpo", **cols, **{k: v for k, v in params.items() if k in EPISODE_KEYS})
    assert torch.equal(gigpo, grpo)
