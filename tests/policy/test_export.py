"""A trained HF policy (full or LoRA) exports from its checkpoint to a folder that plain transformers reloads."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy import build_hf_policy
from gigpo_lab.policy.export import export_hf, policy_state
from gigpo_lab.train import train


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_one_iteration_run_exports_and_reloads_with_from_pretrained(
    model_dir, tiny_overrides, tmp_path, lora
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = compose_config(
        [
            *tiny_overrides,
            "model=hf",
            f"model.path={model_dir}",
            f"model.lora.enabled={str(lora).lower()}",
            "trainer.iterations=1",
            "trainer.optimizer.lr=0.01",
            "rollout.max_new_tokens=4",
            "loss.entropy_coef=0.01",  # a gradient even when every advantage is 0 (the random model never wins)
        ]
    )
    train(cfg)
    ckpt = tmp_path / "out" / "checkpoints" / "last.ckpt"
    out = export_hf(ckpt, tmp_path / "exported")

    exported = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert not any("lora" in k for k in exported.state_dict()), "LoRA is merged"
    assert tokenizer.chat_template and tokenizer.eos_token_id is not None

    # the exported model computes what the trained policy computes (and not what the base computes)
    trained = build_hf_policy(str(model_dir), lora=cfg.model.lora)
    trained.load_state_dict(policy_state(ckpt))
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.tensor([trained.build_prompt("S F G", "", [])])
    trained.eval()
    with torch.no_grad():
        expected = trained.model(input_ids=ids).logits
        torch.testing.assert_close(exported(ids).logits, expected, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(base(ids).logits, expected), "training moved the weights"


def test_the_tiny_policy_does_not_export(tiny_overrides, tmp_path):
    train(compose_config([*tiny_overrides, "trainer.iterations=1"]))
    with pytest.raises(ValueError, match="no Hugging Face policy"):
        export_hf(tmp_path / "out" / "checkpoints" / "last.ckpt", tmp_path / "exported")


def test_export_command_line(model_dir, tmp_path):
    """``python -m gigpo_lab.policy.export CKPT OUT`` on a checkpoint-shaped file (no training needed)."""
    policy = build_hf_policy(str(model_dir))
    state = {f"policy.{k}": v for k, v in policy.state_dict().items()}
    torch.save({"state_dict": state}, tmp_path / "fake.ckpt")
    run = subprocess.run(
        [sys.executable, "-m", "gigpo_lab.policy.export", str(tmp_path / "fake.ckpt"), str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "x" / "config.json").is_file() and "from_pretrained" in run.stdout


def test_gigpo_lab_export_subcommand(model_dir, tmp_path, capsys):
    """``gigpo-lab export CKPT OUT`` is the same command as ``python -m gigpo_lab.policy.export``."""
    from gigpo_lab import cli

    policy = build_hf_policy(str(model_dir))
    torch.save(
        {"state_dict": {f"policy.{k}": v for k, v in policy.state_dict().items()}}, tmp_path / "f.ckpt"
    )
    assert cli.main(["export", str(tmp_path / "f.ckpt"), str(tmp_path / "x")]) == 0
    assert (tmp_path / "x" / "config.json").is_file() and "from_pretrained" in capsys.readouterr().out
    assert "export" in cli.USAGE
