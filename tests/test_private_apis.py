"""Every private API of a third-party library that the lab uses, exercised for the meaning the lab relies on
(issue #63), so that an upgrade that removes or changes one fails here, by name, rather than silently in a run.
Each site carries a comment saying why no public API serves; pyproject.toml pins each library to the tested
range. Small and fast: tiny models built from a config, no training."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from typing import Optional

import pytest
import torch


def _tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        attn_implementation="eager",
    )
    return Qwen2ForCausalLM(config).eval()


class _Routed(Exception):
    """Raised by a stand-in attention function: the model called it."""


def test_transformers_attn_implementation_routes_the_forward(monkeypatch):
    """packing/tree_attention.py: writing config._attn_implementation makes the next forward call the function
    registered under that name, and writing the old name back restores the model's own attention."""
    from gigpo_lab.packing import tree_attention as ta

    def stand_in(*args, **kwargs):
        raise _Routed

    monkeypatch.setattr(ta, "tree_attention_forward", stand_in)  # what _register registers
    model = _tiny_qwen2()
    ids = torch.tensor([[1, 2, 3]])
    with ta.tree_attention(model.config):
        assert model.config._attn_implementation == ta.ATTENTION_NAME
        with pytest.raises(_Routed), torch.no_grad():
            model(ids)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        assert model(ids).logits.shape == (1, 3, 32)


def test_transformers_no_split_modules_names_the_decoder_layer():
    """training/fsdp.py: _no_split_modules names the class of each decoder layer, the FSDP unit."""
    model = _tiny_qwen2()
    assert type(model.model.layers[0]).__name__ in model._no_split_modules


def test_torch_fsdp2_root_has_its_lazy_init():
    """training/fsdp.py: an FSDP2 module's state sets itself up with _lazy_init (its meaning is exercised by
    tests/training/test_fsdp.py, which shards over processes)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    assert callable(FSDPModule._get_fsdp_state) and callable(FSDPState._lazy_init)


def test_torch_non_persistent_buffers_are_the_ones_state_dict_leaves_out():
    """policy/lora.py (module_tensors): _non_persistent_buffers_set lists the buffers that state_dict skips."""
    from gigpo_lab.policy.lora import module_tensors

    module = torch.nn.Linear(2, 2)
    module.register_buffer("kept", torch.zeros(1))
    module.register_buffer("skipped", torch.zeros(1), persistent=False)
    assert module._non_persistent_buffers_set == {"skipped"}
    assert list(module_tensors(module)) == list(module.state_dict())


def test_torch_stores_extra_state_under_its_key():
    """policy/export.py: get_extra_state() is saved under the state-dict key "_extra_state"."""

    class Holder(torch.nn.Module):
        def get_extra_state(self):
            return {"path": "x"}

        def set_extra_state(self, state):
            self.state = state

    state = Holder().state_dict()
    assert state == {"_extra_state": {"path": "x"}}
    loaded = Holder()
    loaded.load_state_dict(state)
    assert loaded.state == {"path": "x"}


def test_argparse_actions_list_the_arguments_of_its_groups():
    """envs/textworld_env.py: parser._actions lists every argument, those added through a group included, with
    its dest, default and required flag (tw-make's challenges add their knobs in groups)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("settings")
    group.add_argument("--level", type=int, required=True)
    group.add_argument("--seed", type=int, default=3)
    knobs = {a.dest: a for a in parser._actions}
    assert set(knobs) == {"level", "seed"} and knobs["level"].required and knobs["seed"].default == 3


def test_hydra_basic_sweeper_is_where_its_target_names_it_and_expands_the_grid():
    """tracking/sweep.py (planned_jobs): Hydra's default sweeper _target_ names hydra._internal's BasicSweeper,
    and its split_arguments expands a grid into the jobs it launches (2 x 3 here)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from gigpo_lab.config_paths import compose_config

    target = compose_config(return_hydra_config=True).hydra.sweeper._target_
    assert target == f"{BasicSweeper.__module__}.{BasicSweeper.__name__}"
    overrides = OverridesParser.create().parse_overrides(["a=1,2", "b=x,y,z"])
    assert sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None)) == 6


@dataclasses.dataclass
class _Schema:
    count: Optional[int] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    link: str = "${.name}"
    name: str = "n"
    required: str = "???"
    inner: dict = dataclasses.field(default_factory=lambda: {"k": 1})


def test_omegaconf_node_internals_read_a_node_unresolved():
    """configdoc/collect.py: _get_node gives a child's node, whose _metadata holds its declared type and
    optionality, _value its unresolved value, and _is_none / _is_missing / _is_interpolation what they say."""
    from omegaconf import DictConfig, OmegaConf

    cfg = OmegaConf.structured(_Schema)
    count, link, required = (cfg._get_node(k) for k in ("count", "link", "required"))
    assert count._metadata.ref_type is int and count._metadata.optional and count._is_none()
    assert link._is_interpolation() and link._value() == "${.name}"
    assert required._is_missing() and not link._is_missing()
    assert isinstance(cfg._get_node("inner"), DictConfig)


def test_lightning_start_method_of_a_built_strategy():
    """training/runtime.py: a built DDP strategy keeps its start method in _start_method."""
    from lightning.pytorch.strategies import DDPStrategy

    assert DDPStrategy(start_method="spawn")._start_method == "spawn"
    assert DDPStrategy()._start_method == "popen"


def test_lightning_observer_calls_its_instance_terminate_all_on_a_dead_child():
    """training/rank_failures.py: the launcher's procs are what _ChildProcessObserver watches (its
    _child_processes), and its check calls _terminate_all looked up on the instance, so the wrapper the lab
    sets there runs before any rank is killed."""
    from lightning.fabric.strategies.launchers.subprocess_script import (
        _ChildProcessObserver,
        _SubprocessScriptLauncher,
    )

    launcher = _SubprocessScriptLauncher(cluster_environment=None, num_processes=1, num_nodes=1)
    assert launcher.procs == []
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    observer = _ChildProcessObserver(main_pid=-1, child_processes=[dead])
    assert observer._child_processes[0] is dead
    calls = []
    observer._terminate_all = lambda: calls.append(True)  # never the real one: it kills main_pid
    assert observer._run() is True and calls == [True]
