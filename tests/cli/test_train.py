"""End-to-end runs of ``train(cfg)`` with a real Lightning Trainer, real envs and a real sqlite MLflow store."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train

ESTIMATORS = ["grpo", "rloo", "reinforce_pp", "gigpo", "gigpo_step_index"]
REQUIRED_METRICS = [
    "rollout/success_rate",
    "rollout/return",
    "rollout/length",
    "rollout/invalid_rate",
    "adv/mean",
    "adv/std",
    "train/loss",
    "train/kl",
    "train/clipfrac",
    "train/entropy",
    "train/grad_norm",
    "time/rollout_s",
    "time/advantage_s",
    "time/update_s",
    "perf/env_steps_per_s",
    "perf/tokens_per_s",
    "eval/success_rate",
    "eval/return",
    "eval/length",
]


def _run(uri: str):
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("gigpo-lab")
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def _policy_state(ckpt_path):
    state = torch.load(ckpt_path, map_location="cpu", weights_only=True)["state_dict"]
    return {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_two_iteration_smoke_run_per_estimator(estimator, tiny_overrides, tmp_path):
    # Sokoban pays -0.1 a valid step, so returns differ within a group even before any success and every
    # estimator has a non-zero signal (gigpo_step_index ignores the invalid-action penalty by definition).
    # 2 groups x 4 envs x 10 turns: some valid moves even from the untrained policy (about 9% of its words).
    sizes = ["env=sokoban", "rollout.group_size=4", "env.max_turns=10"]
    cfg = compose_config([*tiny_overrides, f"estimator={estimator}", *sizes])
    metrics = train(cfg)
    uri = cfg.tracking.uri
    client, run = _run(uri)
    assert run.info.status == "FINISHED"
    assert run.data.tags["estimator"] == estimator
    for key in REQUIRED_METRICS:
        assert key in run.data.metrics, key
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in history] == [0, 1]
    assert run.data.metrics["train/loss"] == pytest.approx(metrics["train/loss"])
    # eval at iterations 0, 1 and after the last one
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/success_rate")] == [0, 1, 2]
    assert run.data.params["estimator._target_"] == cfg.estimator._target_
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "samples", "checkpoints"} <= artifacts
    samples = {a.path for a in client.list_artifacts(run.info.run_id, "samples")}
    assert samples == {"samples/iteration_00000.jsonl", "samples/iteration_00001.jsonl"}
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/last.ckpt"
    ]
    # the policy's parameters changed: the final checkpoint differs from the deterministic initialisation
    from hydra.utils import instantiate

    env = instantiate(cfg.env)
    initial = instantiate(cfg.model)(vocabulary=env.unwrapped.vocabulary()).state_dict()
    final = _policy_state(tmp_path / "out" / "checkpoints" / "last.ckpt")
    assert set(initial) == set(final)
    assert any(not torch.equal(initial[k], final[k]) for k in initial)


def test_resume_matches_an_uninterrupted_run(tmp_path, tiny_overrides):
    base = [
        o for o in tiny_overrides if not o.startswith(("output_dir", "tracking.uri", "trainer.iterations"))
    ]
    # the bonus anneals over trainer.iterations by default; the interrupted run stands for a 4-iteration one
    base.append("exploration.anneal=4")
    straight = train(
        compose_config(
            [
                *base,
                "trainer.iterations=4",
                f"output_dir={tmp_path / 'a'}",
                f"tracking.uri=sqlite:///{tmp_path / 'a.db'}",
            ]
        )
    )
    uri = f"sqlite:///{tmp_path / 'b.db'}"
    train(
        compose_config([*base, "trainer.iterations=2", f"output_dir={tmp_path / 'b'}", f"tracking.uri={uri}"])
    )
    resumed = train(
        compose_config(
            [
                *base,
                "trainer.iterations=4",
                f"output_dir={tmp_path / 'b'}",
                f"tracking.uri={uri}",
                f"ckpt_path={tmp_path / 'b' / 'checkpoints' / 'last.ckpt'}",
            ]
        )
    )
    for key in ("train/loss", "rollout/return", "eval/success_rate", "rollout/env_steps_total", "adv/std"):
        assert resumed[key] == straight[key], key
    a = _policy_state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    b = _policy_state(tmp_path / "b" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    client, run = _run(uri)  # one run, continued: each loss step exactly once
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [0, 1, 2, 3]


def test_a_failing_run_is_marked_failed_and_keeps_a_checkpoint(tmp_path, tiny_overrides):
    cfg = compose_config(
        [*tiny_overrides, "trainer.optimizer.lr=1e30", "loss.kl_coef=0.0", "trainer.iterations=6"]
    )
    with pytest.raises(Exception):  # noqa: B017 - NaN loss, or NaN logits caught by the sampler first
        train(cfg)
    _, run = _run(cfg.tracking.uri)
    assert run.info.status == "FAILED"
    assert "error" in run.data.tags
    assert (tmp_path / "out" / "checkpoints" / "on_exception.ckpt").is_file()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.group_size=1", "group_size"),
        ("env.max_turns=0", "max_turns"),
        ("estimator.gamma=1.5", "gamma"),
        ("estimator.step_advantage_weight=-0.5", "step_advantage_weight"),
    ],
)
def test_bad_values_fail_before_any_rollout(override, message, tiny_overrides):
    with pytest.raises(ValueError, match=message):
        train(compose_config([*tiny_overrides, override]))


def test_missing_model_path_is_a_clear_error(tiny_overrides, tmp_path):
    with pytest.raises(Exception, match="model.path"):
        train(compose_config([*tiny_overrides, "model=hf", f"model.path={tmp_path / 'no_model'}"]))


class _AnchorlessEnv(gymnasium.Env):
    """A text env that reports no ``info["anchor"]``: GiGPO cannot form step groups on it."""

    observation_space = gymnasium.spaces.Text(max_length=8)
    action_space = gymnasium.spaces.Text(max_length=8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "x", {"admissible_actions": ["go"], "success": False}

    def step(self, action):
        return "x", 0.0, True, False, {"invalid": False, "success": False, "admissible_actions": ["go"]}


def make_anchorless_env(**kwargs):
    return _AnchorlessEnv()


def test_gigpo_on_an_env_without_anchors_fails_before_any_rollout(tiny_overrides, tmp_path):
    cfg = compose_config([*tiny_overrides, "env._target_=tests.cli.test_train.make_anchorless_env"])
    with pytest.raises(Exception, match="anchor_ids") as err:
        train(cfg)
    assert "gigpo" in str(err.value)
    assert not (tmp_path / "out" / "checkpoints").exists()  # nothing ran


def test_env_step_budget_stops_the_run(tiny_overrides):
    cfg = compose_config([*tiny_overrides, "trainer.iterations=5", "trainer.max_env_steps=1"])
    metrics = train(cfg)
    client, run = _run(cfg.tracking.uri)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [0]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/success_rate")] == [0, 1]
    assert metrics["rollout/env_steps_total"] >= 1


def test_a_fresh_run_in_a_used_folder_does_not_resume_silently(tiny_overrides):
    first = train(compose_config(tiny_overrides))
    second = train(compose_config(tiny_overrides))  # same output_dir, which now holds last.ckpt
    assert second["rollout/env_steps_total"] == first["rollout/env_steps_total"]
    assert second["train/loss"] == first["train/loss"]


def test_an_hf_model_trains_end_to_end(tiny_overrides, tmp_path):
    """``model=hf`` on a tiny random Qwen2 saved by the test (no hub): chat prompts, 8-token responses."""
    from hf_tiny import build_tiny_hf_model

    path = build_tiny_hf_model(tmp_path / "hf")
    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={path}",
            "rollout.max_new_tokens=8",
            "trainer.iterations=1",
            "loss.kl_coef=0.0",
            "estimator=grpo",
        ]
    )
    metrics = train(cfg)
    assert metrics["rollout/tokens"] > 0 and "train/loss" in metrics
    _, run = _run(cfg.tracking.uri)
    assert run.info.status == "FINISHED" and run.data.tags["model"] != "tiny"
