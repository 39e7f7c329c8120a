"""A checkpoint without its frozen base (``trainer.checkpoint_frozen_base=false``) resumes and exports to what a
whole one gives, and refuses a base it did not train on."""

from __future__ import annotations

import shutil

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from hypothesis import given, settings
from hypothesis import strategies as st
from real_runs import CLOCK_PREFIXES
from real_runs import checkpoint_tensors as all_entries

from gigpo_lab.config_paths import compose_config
from gigpo_lab.policy.export import export_hf
from gigpo_lab.policy.frozen_base import fingerprint, frozen_parameters, leave_out, put_back, record
from gigpo_lab.train import train
from tests.conftest import TINY


def checkpoint_tensors(path):
    """The checkpoint's tensors by name (the HF policy's build arguments, a dict, left aside)."""
    return {k: v for k, v in all_entries(path).items() if isinstance(v, torch.Tensor)}


class Tied(torch.nn.Module):
    """A frozen embedding tied to a frozen head, a frozen bias, and one trainable layer."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(7, 4)
        self.head = torch.nn.Linear(4, 7)
        self.head.weight = self.embed.weight
        self.adapter = torch.nn.Linear(4, 4)
        self.embed.requires_grad_(False)
        self.head.bias.requires_grad_(False)


def test_leave_out_and_put_back_restore_the_state_dict_under_every_tied_name():
    module = Tied()
    full = {f"p.{k}": v.clone() for k, v in module.state_dict().items()}
    state = dict(full)
    kept = record(module)
    leave_out(state, "p.", kept)
    assert set(state) == {"p.adapter.weight", "p.adapter.bias"}, "both names of the tied weight are gone"
    put_back(state, Tied(), "p.", kept, "x.ckpt")  # a fresh build of the same base
    assert state.keys() == full.keys() and all(torch.equal(state[k], full[k]) for k in full)


def test_the_saved_dtypes_come_back_where_a_precision_plugin_cast_the_module():
    """Under lightning.precision=bf16-true the saved weights are bf16 while the module is built in float32:
    put back, they are the bf16 ones a whole checkpoint would have held."""
    module = Tied()
    kept = record(module)  # as built: float32
    saved = {f"p.{k}": v.to(torch.bfloat16) for k, v in module.state_dict().items()}  # as cast at save time
    whole = dict(saved)
    kept = leave_out(saved, "p.", kept)
    assert set(kept["dtypes"].values()) == {"torch.bfloat16"}
    put_back(saved, Tied(), "p.", kept, "x.ckpt")
    assert all(saved[k].dtype == torch.bfloat16 and torch.equal(saved[k], whole[k]) for k in whole)


def test_a_reference_the_resumed_run_does_not_build_is_refused(tiny_overrides):
    from gigpo_lab.train import build

    saved = build(
        compose_config([*tiny_overrides, "loss.kl_coef=0.05", "trainer.checkpoint_frozen_base=false"])
    )
    checkpoint = {"state_dict": saved.state_dict()}
    saved.on_save_checkpoint(checkpoint)
    assert not any(k.startswith("reference.") for k in checkpoint["state_dict"])
    without = build(compose_config(tiny_overrides))  # kl_coef 0: no reference
    with pytest.raises(ValueError, match=r"^x\.ckpt was saved with a frozen reference copy .*loss\.kl_coef"):
        without.restore_frozen(checkpoint, "x.ckpt")
    again = build(compose_config([*tiny_overrides, "loss.kl_coef=0.05"]))
    again.restore_frozen(checkpoint, "x.ckpt")
    again.load_state_dict(checkpoint["state_dict"])  # strict: every weight is back


def test_another_base_is_refused_with_the_fix():
    kept = record(Tied(seed=0))
    with pytest.raises(
        ValueError, match=r"x\.ckpt was saved without its frozen weights.*checkpoint_frozen_base=true"
    ):
        put_back({}, Tied(seed=1), "p.", kept, "x.ckpt")


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    where=st.integers(0, 10**6),
    bit=st.integers(0, 7),
)
def test_the_fingerprint_changes_with_any_flipped_bit_and_not_otherwise(shape, dtype, where, bit):
    t = torch.randn(shape).to(dtype)
    assert fingerprint({"w": t}) == fingerprint({"w": t.clone()})
    flipped = t.clone()
    raw = flipped.reshape(-1).view(torch.uint8)
    raw[where % raw.numel()] ^= 1 << bit
    assert fingerprint({"w": flipped}) != fingerprint({"w": t})
    assert fingerprint({"w": t.float()}) != fingerprint({"w": t}) or dtype == torch.float32  # dtype counts
    assert fingerprint({"v": t}) != fingerprint({"w": t})  # the name counts


def test_frozen_parameters_are_the_ones_that_do_not_train():
    assert set(frozen_parameters(Tied())) == {"embed.weight", "head.weight", "head.bias"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


def _lora_run(tmp_path, store, name, model_dir, *extra):
    shutil.copyfile(store, tmp_path / f"{name}.db")
    overrides = [
        *TINY, "model=hf", f"model.path={model_dir}", "model.lora.enabled=true", "trainer.optimizer.lr=0.01",
        "rollout.max_new_tokens=4", "loss.entropy_coef=0.01", "trainer.checkpoint_every=1",
        f"output_dir={tmp_path / name}", f"tracking.uri=sqlite:///{tmp_path / f'{name}.db'}", *extra,
    ]  # fmt: skip
    return train(compose_config(overrides)), tmp_path / name / "checkpoints"


def test_a_lora_run_saved_without_its_base_resumes_and_exports_as_the_whole_run(
    model_dir, tmp_path, empty_mlflow_store
):
    """Two iterations, light and whole; the light run resumed from its first checkpoint repeats it exactly;
    the light checkpoint holds no base weight, and exports the model that the whole one exports."""
    whole, whole_dir = _lora_run(tmp_path, empty_mlflow_store, "whole", model_dir, "trainer.iterations=2")
    light, light_dir = _lora_run(
        tmp_path,
        empty_mlflow_store,
        "light",
        model_dir,
        "trainer.iterations=2",
        "trainer.checkpoint_frozen_base=false",
    )
    keys = [k for k in whole if not k.startswith(CLOCK_PREFIXES)]
    assert {k: light[k] for k in keys} == {k: whole[k] for k in keys}, "the switch changes no number"

    a, b = checkpoint_tensors(whole_dir / "last.ckpt"), checkpoint_tensors(light_dir / "last.ckpt")
    left = set(a) - set(b)
    assert left and all("lora" not in k for k in left), "only base weights are left out"
    assert all("lora" in k for k in b if k.startswith("weights/"))
    assert all(torch.equal(a[k], b[k]) for k in b), "what the light one holds equals the whole one's"
    assert (light_dir / "last.ckpt").stat().st_size < (whole_dir / "last.ckpt").stat().st_size / 2

    resumed, resumed_dir = _lora_run(  # in a copy of light's store: the checkpoint names its run
        tmp_path, tmp_path / "light.db", "resumed", model_dir, "trainer.iterations=2",
        "trainer.checkpoint_frozen_base=false", f"ckpt_path={light_dir / 'iter0000.ckpt'}",
    )  # fmt: skip
    assert {k: resumed[k] for k in keys} == {k: whole[k] for k in keys}
    c = checkpoint_tensors(resumed_dir / "last.ckpt")
    assert c.keys() == b.keys() and all(torch.equal(b[k], c[k]) for k in b)

    from transformers import AutoModelForCausalLM

    x, y = (
        export_hf(whole_dir / "last.ckpt", tmp_path / "x"),
        export_hf(light_dir / "last.ckpt", tmp_path / "y"),
    )
    sx, sy = (
        AutoModelForCausalLM.from_pretrained(x).state_dict(),
        AutoModelForCausalLM.from_pretrained(y).state_dict(),
    )
    assert sx.keys() == sy.keys() and all(torch.equal(sx[k], sy[k]) for k in sx)

    other = build_tiny_hf_model(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="does not have the ones it trained on.*--base-path"):
        export_hf(light_dir / "last.ckpt", tmp_path / "z", base_path=str(other))
    with pytest.raises(ValueError, match=r"iter0000\.ckpt was saved .* does not have the ones it trained on"):
        _lora_run(
            tmp_path, tmp_path / "light.db", "wrong", other, "trainer.iterations=2",
            f"ckpt_path={light_dir / 'iter0000.ckpt'}",
        )  # fmt: skip


def test_a_tiny_run_leaves_out_its_frozen_reference_and_resumes_exactly(tmp_path, empty_mlflow_store):
    """The tiny policy's KL reference is a frozen copy of the starting policy: left out, rebuilt, the same."""
    kl = ["loss.kl_coef=0.05", "trainer.iterations=3", "trainer.checkpoint_every=1"]

    def run(name, *extra):
        shutil.copyfile(empty_mlflow_store, tmp_path / f"{name}.db")
        out = [
            *TINY,
            *kl,
            f"output_dir={tmp_path / name}",
            f"tracking.uri=sqlite:///{tmp_path / f'{name}.db'}",
        ]
        return train(compose_config([*out, *extra])), tmp_path / name / "checkpoints"

    whole, whole_dir = run("whole")
    light, light_dir = run("light", "trainer.checkpoint_frozen_base=false")
    a, b = checkpoint_tensors(whole_dir / "last.ckpt"), checkpoint_tensors(light_dir / "last.ckpt")
    assert {k for k in a if k.startswith("weights/reference.")} and not {k for k in b if "reference." in k}
    shutil.copyfile(tmp_path / "light.db", tmp_path / "again.db")
    again = train(
        compose_config(
            [*TINY, *kl, f"output_dir={tmp_path / 'again'}", f"tracking.uri=sqlite:///{tmp_path / 'again.db'}",
             "trainer.checkpoint_frozen_base=false", f"ckpt_path={light_dir / 'iter0001.ckpt'}"]
        )
    )  # fmt: skip
    keys = [k for k in whole if not k.startswith(CLOCK_PREFIXES)]
    assert {k: again[k] for k in keys} == {k: light[k] for k in keys} == {k: whole[k] for k in keys}
    c = checkpoint_tensors(tmp_path / "again" / "checkpoints" / "last.ckpt")
    assert c.keys() == b.keys() and all(torch.equal(b[k], c[k]) for k in b)
