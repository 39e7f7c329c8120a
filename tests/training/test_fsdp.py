"""``lightning=fsdp`` (gigpo_lab/training/fsdp.py) on 2 CPU ranks (gloo), with a tiny Hugging Face model built
from a config (tests/hf_tiny.py), through the console script as the README types it.

- a few iterations under FSDP equal the same iterations under DDP: the same seeds and episodes (every metric,
  env steps included), losses and weights. Stated tolerance: 1e-6 absolute on weights and Adam's moments,
  1e-6 relative on the metrics (FSDP reduce-scatters where DDP all-reduces; on 2 ranks both add the same
  two numbers, and the runs measured here agree bit for bit);
- a resumed FSDP run repeats the uninterrupted one, metric for metric and bit for bit (slow);
- its checkpoint is a full state dict that ``gigpo-lab export`` turns into a Hugging Face folder;
- with LoRA, the adapters train and the sharded base stays bit-identical (slow);
- the combinations it cannot run are refused before any run opens, in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from real_runs import checkpoint_tensors, metric_histories
from tiny_sizes import TINY

from gigpo_lab.config_paths import compose_config
from gigpo_lab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TWO_CPU_RANKS = ["lightning.accelerator=cpu", "lightning.devices=2", "lightning.precision=32-true"]
#: A gradient in every iteration (the random model never wins, so the entropy and KL terms give one).
LEARNS = [
    "rollout.max_new_tokens=4",
    "loss.kl_coef=0.1",
    "loss.entropy_coef=0.01",
    "trainer.optimizer.lr=0.01",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_hf_model(tmp_path_factory.mktemp("hf") / "model")


def assert_close_states(a: dict, b: dict) -> None:
    """Two flattened checkpoints (``checkpoint_tensors``): the same keys, tensors within 1e-6, the rest equal."""
    assert a.keys() == b.keys()
    for key, want in b.items():
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(a[key], want, rtol=0, atol=1e-6, msg=key)
        else:
            assert a[key] == want, key


def cli(folder: Path, *overrides: str, store: Path | None = None) -> subprocess.CompletedProcess:
    """``gigpo-lab train`` on 2 CPU ranks (Lightning relaunches the command for rank 1), output under
    ``folder/out``, tracking in ``store`` (default ``folder/mlflow.db``)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = store or folder / "mlflow.db"
    args = [
        *TINY,
        *TWO_CPU_RANKS,
        f"output_dir={folder / 'out'}",
        f"tracking.uri=sqlite:///{store}",
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    gigpo_lab = str(Path(sys.executable).parent / "gigpo-lab")
    run = subprocess.run(
        [gigpo_lab, "train", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return run


@pytest.fixture(scope="module")
def fsdp_and_ddp(tmp_path_factory, model_dir):
    """The same 2-iteration job under lightning=fsdp and under lightning=ddp."""
    root = tmp_path_factory.mktemp("fsdp_vs_ddp")
    hf = ["model=hf", f"model.path={model_dir}", *LEARNS]
    cli(root / "fsdp", "lightning=fsdp", *hf)
    cli(root / "ddp", "lightning=ddp", *hf)
    return root


@pytest.mark.slow  # with its fixture, about 70 s of the default suite's 10 minutes
def test_fsdp_repeats_ddp_on_two_cpu_ranks(fsdp_and_ddp, model_dir):
    from transformers import AutoModelForCausalLM

    fsdp, ddp = (metric_histories(f"sqlite:///{fsdp_and_ddp / n / 'mlflow.db'}") for n in ("fsdp", "ddp"))
    assert fsdp.keys() == ddp.keys() and "train/loss" in fsdp
    for key, points in ddp.items():
        assert [s for s, _ in fsdp[key]] == [s for s, _ in points], key
        assert [v for _, v in fsdp[key]] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-9), key
    assert [v for _, v in fsdp["rollout/env_steps"]] == [v for _, v in ddp["rollout/env_steps"]]

    a, b = (
        checkpoint_tensors(fsdp_and_ddp / n / "out" / "checkpoints" / "last.ckpt") for n in ("fsdp", "ddp")
    )
    assert_close_states(a, b)
    initial = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    moved = [k for k, v in initial.items() if not torch.equal(a[f"weights/policy.model.{k}"], v)]
    assert len(moved) > len(initial) // 2, "the weights trained"


@pytest.mark.slow  # with its fixture, about 70 s of the default suite's 10 minutes
def test_the_fsdp_checkpoint_exports_to_the_same_hugging_face_folder_as_ddp(fsdp_and_ddp, tmp_path):
    from transformers import AutoModelForCausalLM

    gigpo_lab = str(Path(sys.executable).parent / "gigpo-lab")
    for name in ("fsdp", "ddp"):
        ckpt = fsdp_and_ddp / name / "out" / "checkpoints" / "last.ckpt"
        subprocess.run(
            [gigpo_lab, "export", str(ckpt), str(tmp_path / name)], check=True, capture_output=True
        )
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / n).state_dict() for n in ("fsdp", "ddp"))
    assert a.keys() == b.keys()
    for key in b:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


@pytest.mark.slow
def test_a_resumed_fsdp_run_repeats_the_uninterrupted_one(
    fsdp_and_ddp, model_dir, tmp_path, empty_mlflow_store
):
    """3 iterations straight, and the same job resumed from its own checkpoint after iteration 1."""
    hf = ["lightning=fsdp", "model=hf", f"model.path={model_dir}", *LEARNS, "trainer.iterations=3"]
    shutil.copyfile(empty_mlflow_store, tmp_path / "a.db")
    cli(tmp_path / "a", *hf, store=tmp_path / "a.db")
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")  # the same store: the checkpoint names its run
    ckpt = tmp_path / "a" / "out" / "checkpoints" / "iter0001.ckpt"
    cli(tmp_path / "b", *hf, f"ckpt_path={ckpt}", store=tmp_path / "b.db")
    straight, resumed = (metric_histories(f"sqlite:///{tmp_path / n}.db") for n in ("a", "b"))
    assert resumed == straight
    a, b = (checkpoint_tensors(tmp_path / n / "out" / "checkpoints" / "last.ckpt") for n in ("a", "b"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) if isinstance(b[k], torch.Tensor) else a[k] == b[k] for k in b)


@pytest.mark.slow
def test_lora_under_fsdp_trains_the_adapters_only_and_repeats_ddp(model_dir, tmp_path):
    lora = ["model=hf", f"model.path={model_dir}", "model.lora.enabled=true", "model.lora.r=4", *LEARNS]
    cli(tmp_path / "fsdp", "lightning=fsdp", *lora)
    cli(tmp_path / "ddp", "lightning=ddp", *lora)
    a, b = (checkpoint_tensors(tmp_path / n / "out" / "checkpoints" / "last.ckpt") for n in ("fsdp", "ddp"))
    assert_close_states(a, b)
    from gigpo_lab.policy import build_hf_policy

    settings = compose_config(lora).model.lora  # the run's LoRA settings: its initialisation exactly
    initial = build_hf_policy(str(model_dir), lora=dict(settings)).state_dict()
    moved = {
        k for k in initial if k != "_extra_state" and not torch.equal(initial[k], a[f"weights/policy.{k}"])
    }
    assert moved and all(".lora_" in k for k in moved), "the sharded base stays bit-identical"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"^lightning=fsdp shards a Hugging Face model's decoder layers, and model=tiny has none; use"),
        (
            ["model=hf", "model.path=.", "trainer.shared_prefix=true"],
            r"^trainer.shared_prefix=true with lightning=fsdp: .*set trainer.shared_prefix=false$",
        ),
        (
            ["model=hf", "model.path=.", "trainer.checkpoint_frozen_base=false"],
            r"^trainer.checkpoint_frozen_base=false with lightning=fsdp: .*set trainer.checkpoint_frozen_base=true .*--keep-checkpoints\)$",
        ),
    ],
    ids=["tiny_policy", "shared_prefix", "frozen_base"],
)
def test_what_fsdp_cannot_run_is_refused_at_compose_time(overrides, message):
    from gigpo_lab.training.config_checks import validate_config

    cfg = compose_config(["lightning=fsdp", *TWO_CPU_RANKS, *overrides])
    with pytest.raises(ConfigError, match=message) as err:
        validate_config(cfg)
    assert "\n" not in str(err.value)


def test_the_fsdp_option_builds_the_labs_sharded_strategy():
    from hydra.utils import instantiate

    from gigpo_lab.training.fsdp import ShardedStrategy

    cfg = compose_config(["lightning=fsdp"])
    assert cfg.lightning.accelerator == "gpu" and cfg.trainer.minibatch_size == 0
    strategy = instantiate(cfg.lightning).trainer_args["strategy"]
    assert isinstance(strategy, ShardedStrategy) and not strategy._save_distributed_checkpoint, (
        "one full .ckpt"
    )
