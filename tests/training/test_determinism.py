"""Same config + seed => the same metrics and the same weights, bit for bit, on the CPU (docs/FAULTS.md).

Every metric except wall-clock ones (``time/*``, ``perf/*``) is compared over its whole MLflow history, and
the final checkpoint's weights and optimizer state with ``torch.equal``. Resuming is covered by
``test_train.py::test_resume_matches_an_uninterrupted_run`` and, after a SIGKILL, by
``test_faults_slow.py::test_sigkill_mid_iteration_resumes_without_losing_or_repeating_a_metric_step``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from real_runs import CLOCK_PREFIXES, checkpoint_tensors, metric_histories

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train
from tests.conftest import TINY


@pytest.fixture
def run_tiny(tmp_path, empty_mlflow_store):
    """``run_tiny(name, *overrides)``: a 3-iteration TINY run in its own store; its histories and tensors."""

    def run(name: str, *extra: str) -> tuple[dict, dict]:
        shutil.copyfile(empty_mlflow_store, tmp_path / f"{name}.db")
        return _train(tmp_path, name, *extra)

    return run


def _train(tmp_path: Path, name: str, *extra: str) -> tuple[dict, dict]:
    uri = f"sqlite:///{tmp_path / f'{name}.db'}"
    train(
        compose_config(
            [*TINY, "trainer.iterations=3", f"output_dir={tmp_path / name}", f"tracking.uri={uri}", *extra]
        )
    )
    return metric_histories(uri), checkpoint_tensors(tmp_path / name / "checkpoints" / "last.ckpt")


def assert_identical(a: tuple[dict, dict], b: tuple[dict, dict]) -> None:
    (metrics_a, weights_a), (metrics_b, weights_b) = a, b
    assert metrics_a.keys() == metrics_b.keys()
    for key in metrics_a:
        assert metrics_a[key] == metrics_b[key], key  # exact equality: NaN-free floats from the same ops
    assert weights_a.keys() == weights_b.keys()
    for key in weights_a:
        assert torch.equal(weights_a[key], weights_b[key]), key


def test_same_config_and_seed_twice_gives_identical_metrics_and_weights(run_tiny):
    first = run_tiny("first")
    second = run_tiny("second")
    assert len(first[0]["train/loss"]) == 3 and len(first[0]["eval/success_rate"]) == 4
    assert_identical(first, second)


def test_deterministic_algorithms_change_nothing_on_the_cpu(run_tiny):
    """``lightning.deterministic=true`` (torch.use_deterministic_algorithms) runs, and gives the CPU's same bits."""
    assert_identical(run_tiny("default"), run_tiny("strict", "lightning.deterministic=true"))


def test_another_seed_gives_other_metrics(run_tiny):
    """The comparison above can fail: a different seed changes the sampled rollouts."""
    a, _ = run_tiny("seed0")
    b, _ = run_tiny("seed1", "seed=1")
    assert a["adv/std"] != b["adv/std"] or a["train/loss"] != b["train/loss"]


def test_resuming_from_a_checkpoint_written_mid_run_repeats_the_uninterrupted_run(
    tmp_path, empty_mlflow_store
):
    """``iter0001.ckpt`` of a 4-iteration run (written at the end of iteration 1, inside ``fit``) resumes at
    iteration 2: the resumed process computes the very metrics and weights of the uninterrupted one."""
    sizes = [*TINY, "trainer.iterations=4"]
    shutil.copyfile(empty_mlflow_store, tmp_path / "a.db")
    uri_a = f"sqlite:///{tmp_path / 'a.db'}"
    straight = train(compose_config([*sizes, f"output_dir={tmp_path / 'a'}", f"tracking.uri={uri_a}"]))
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")  # the same store: the checkpoint names its run
    resumed = train(
        compose_config(
            [
                *sizes,
                f"output_dir={tmp_path / 'b'}",
                f"tracking.uri=sqlite:///{tmp_path / 'b.db'}",
                f"ckpt_path={tmp_path / 'a' / 'checkpoints' / 'iter0001.ckpt'}",
            ]
        )
    )
    keys = [k for k in straight if not k.startswith(CLOCK_PREFIXES)]
    assert {k: resumed[k] for k in keys} == {k: straight[k] for k in keys}
    a = checkpoint_tensors(tmp_path / "a" / "checkpoints" / "last.ckpt")
    b = checkpoint_tensors(tmp_path / "b" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_finished_run_extended_to_more_iterations_is_the_fresh_longer_run(
    run_tiny, tmp_path, empty_mlflow_store
):
    """Extending a finished run (its ``last.ckpt``, more ``trainer.iterations``) with the bonus's anneal pinned
    to the first run's length gives, metric for metric and bit for bit, the run that was asked for that many
    iterations from the start: how the 300-iteration Taxi row of docs/notebook/2026-11_seed_robustness.md was measured."""
    pinned = ["exploration.anneal=2", "trainer.eval_every=1"]
    long = run_tiny("long", *pinned, "trainer.iterations=4")
    shutil.copyfile(empty_mlflow_store, tmp_path / "short.db")
    uri = f"sqlite:///{tmp_path / 'short.db'}"
    base = [*TINY, *pinned, f"output_dir={tmp_path / 'short'}", f"tracking.uri={uri}"]
    train(compose_config([*base, "trainer.iterations=2"]))
    ckpt = tmp_path / "short" / "checkpoints" / "last.ckpt"
    train(compose_config([*base, "trainer.iterations=4", f"ckpt_path={ckpt}"]))
    extended = metric_histories(uri), checkpoint_tensors(ckpt)
    assert [s for s, _ in long[0]["rollout/novelty_beta"]] == [0, 1, 2, 3]
    assert [v for _, v in long[0]["rollout/novelty_beta"]][2:] == [0.0, 0.0]  # faded after the first two
    assert_identical(long, extended)


# ----------------------------------------------------------------------------- CUDA (pytest -m gpu)
def _gpu_run(deterministic: bool) -> tuple[list, dict]:
    """4 iterations of the tiny policy on FrozenLake (8 x 8 envs) on one GPU, without Hydra or MLflow."""
    from functools import partial

    import lightning as L

    from gigpo_lab.algorithm import GiGPO
    from gigpo_lab.algorithm.loss import PolicyLoss
    from gigpo_lab.envs import make_env
    from gigpo_lab.policy import build_tiny_policy
    from gigpo_lab.rollout import build_torch_engine
    from gigpo_lab.rollout.collector import Collector
    from gigpo_lab.tracking.callback import IterationLogger
    from gigpo_lab.training.module import GiGPOModule
    from gigpo_lab.training.schema import TrainerConfig

    env_fn = partial(make_env, id="gigpo_lab/FrozenLake-v0", max_turns=8, random_map=True)
    policy = build_tiny_policy(vocabulary=env_fn().unwrapped.vocabulary())
    engine = build_torch_engine(policy)
    module = GiGPOModule(
        policy,
        GiGPO(),
        PolicyLoss(kl_coef=0.01),
        Collector(env_fn, policy, engine, groups=8, group_size=8),
        engine,
        TrainerConfig(
            optimizer=partial(torch.optim.AdamW, lr=1e-3),
            ppo_epochs=2,
            minibatch_size=64,
            eval_every=2,
            sample_every=0,
            distinct_rows=False,
        ),
        eval_episodes=16,
    )
    logger = IterationLogger(None)
    trainer = L.Trainer(
        max_epochs=4,
        accelerator="gpu",
        devices=1,
        deterministic=deterministic,
        callbacks=[logger],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    L.seed_everything(0, verbose=False)
    trainer.fit(module)
    history = [
        (s, {k: v for k, v in m.items() if not k.startswith(CLOCK_PREFIXES)}) for s, m in logger.history
    ]
    return history, {k: v.detach().cpu() for k, v in policy.state_dict().items()}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_runs_repeat_bit_for_bit_with_deterministic_algorithms():
    """``lightning.deterministic=true`` on CUDA: no op raises for lack of a deterministic kernel, and two runs
    give the same metrics and weights (without it, atomics in embedding backward and index_add_ may not)."""
    (history_a, weights_a), (history_b, weights_b) = _gpu_run(True), _gpu_run(True)
    assert history_a == history_b
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_learning_rate_zero_is_a_frozen_control(run_tiny):
    """``trainer.optimizer.lr=0`` (a control run) is accepted and never moves a weight: the weights after 1
    and after 3 iterations are the same tensors, while at the default lr they differ (after 3 iterations: an
    iteration whose tiny groups all earned the same carries no gradient, and leaves the weights alone too)."""
    weights = {}
    for name, extra in {
        "frozen1": ("trainer.optimizer.lr=0", "trainer.iterations=1"),
        "frozen3": ("trainer.optimizer.lr=0",),
        "learning3": (),
    }.items():
        _, tensors = run_tiny(name, *extra)
        weights[name] = {k: v for k, v in tensors.items() if k.startswith("weights/")}
    assert weights["frozen1"] and weights["frozen1"].keys() == weights["frozen3"].keys()
    assert all(torch.equal(weights["frozen1"][k], weights["frozen3"][k]) for k in weights["frozen1"])
    # the check can fail: learning iterations move the weights away from the frozen ones
    assert any(not torch.equal(weights["frozen3"][k], weights["learning3"][k]) for k in weights["frozen3"])
