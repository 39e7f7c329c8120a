"""Fully sharded data parallelism (``lightning=fsdp``): FSDP2 through Lightning's ``ModelParallelStrategy``.

Why FSDP2 and not Lightning's ``FSDPStrategy``: that strategy wraps FSDP1, which in torch 2.13 refuses a
process without an accelerator ("FSDP needs a non-CPU accelerator device"), so it could not run, or be
tested, on CPU ranks. FSDP2 (``torch.distributed.fsdp.fully_shard``) shards every parameter as a DTensor on
a device mesh, with gloo on CPUs as with NCCL on GPUs, and a frozen base weight and a trainable LoRA
adapter can sit in one unit. Lightning 2.6 runs FSDP2 through ``ModelParallelStrategy`` and its
``configure_model`` hook; ``ShardedStrategy`` is that strategy with every process on the data-parallel
dimension (no tensor parallelism) and full-state checkpoints, so ``gigpo-lab export`` and resume read them
as they read a DDP run's.

Where the weights are, in one iteration (``GiGPOModule``):

- **update** (``training_step``): each decoder layer (the classes a ``transformers`` model lists in
  ``_no_split_modules``) is one FSDP unit, all-gathered in its forward and resharded after it; the policy
  itself is the root unit (embeddings, final norm, LM head, value head), entered through ``logprobs`` and
  ``values``, registered as forward methods. Gradients are reduce-scattered, so each rank keeps 1/world of
  the weights, gradients and optimizer state.
- **rollout, old and reference scoring, evaluation, engine sync** (``gathered``): every unit is all-gathered
  once, the same collectives on every rank, and no forward reshards until the block ends. A collection of
  any length then makes no collective call, so ranks whose episodes differ cannot hang, and the torch
  engine samples from plain tensors. This is verl's hybrid-engine order (gather for the rollout, shard for
  the update); the sharded forward instead would all-gather every layer at every sampled token, and ranks
  whose episodes differ in length would make different numbers of those calls and hang. Nothing inside the
  block may call ``state_dict()``: FSDP2's state-dict hooks reshard; the engines' weight sync reads the
  modules' tensors instead (``policy.lora.module_tensors``).
- **reference**: a full fine-tuning run's frozen copy is sharded the same way as the policy and gathered
  with it; with LoRA the reference is the policy with its adapters off (no copy, nothing more to shard).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta

import torch
from lightning.pytorch.strategies import ModelParallelStrategy

#: The policy methods that run a forward in the update: FSDP2 gathers the root unit around them.
FORWARD_METHODS = ("logprobs", "values")


class ShardedStrategy(ModelParallelStrategy):
    """``ModelParallelStrategy`` whose FSDP2 shards over every process: a 1-D data-parallel mesh
    (``data_parallel_mesh``), no tensor parallelism.

    Lightning's own mesh (``device_mesh``, both sizes "auto") is nodes x processes per node; the lab does not
    shard over it, but over ``data_parallel_mesh``, which spans every process (torch gives a mesh of the whole
    world the default process group).

    Args:
        save_distributed_checkpoint: false (the lab's default) assembles the full weights and optimizer
            state on rank 0 into one ``.ckpt``; true writes one shard per rank into a folder.
        process_group_backend: None = Lightning's choice for the device (gloo on CPUs, NCCL on GPUs).
        timeout: of the process group's collectives.
    """

    def __init__(
        self,
        save_distributed_checkpoint: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = timedelta(minutes=30),
    ) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size="auto",
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self.data_parallel_mesh = None

    def setup_environment(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        super().setup_environment()  # the process group, and Lightning's mesh
        self.data_parallel_mesh = init_device_mesh(
            self.root_device.type, (self.world_size,), mesh_dim_names=("data_parallel",)
        )


def shard(module: torch.nn.Module, mesh) -> None:
    """Apply FSDP2 to the policy and a reference copy (attributes ``policy``, ``reference`` of ``module``).

    Each decoder layer is a unit, then each model is its root unit, over the 1-D ``mesh``; a reference that
    is no module of its own (LoRA's adapter-free view of the policy) needs nothing. Idempotent.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

    for model in (module.policy, getattr(module, "reference", None)):
        if not isinstance(model, torch.nn.Module) or isinstance(model, FSDPModule):
            continue
        # transformers' _no_split_modules names a model's decoder layer classes (accelerate's device_map reads
        # it too); no public attribute does. Pinned major (pyproject.toml); tests/test_private_apis.py
        layers = set(getattr(_hf_model(model), "_no_split_modules", None) or ())
        for sub in model.modules():
            if type(sub).__name__ in layers:
                fully_shard(sub, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        for name in FORWARD_METHODS:
            if hasattr(model, name):
                register_fsdp_forward_method(model, name)


def _hf_model(policy: torch.nn.Module):
    """The ``transformers`` model inside a policy (through a peft wrapper), or None."""
    model = getattr(policy, "model", None)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def units(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP2 units under ``module`` (empty unless ``shard`` ran)."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(module: torch.nn.Module) -> Iterator[None]:
    """Inside the block every FSDP2 unit under ``module`` holds its full weights, and no forward reshards
    (a collective on every rank on entry and exit, none inside). Nothing happens for an unsharded module."""
    found = units(module)
    inner = {id(sub) for unit in found for sub in unit.modules() if sub is not unit}
    for root in (unit for unit in found if id(unit) not in inner):
        # A root's state is set up in its first forward. The rollout calls the layers directly, so without
        # this a layer would set itself up as a root, and the policy's own first forward would then fail
        # (private: torch 2.11-2.13 has no public call for it, so pyproject.toml pins the tested torch range; it
        # does nothing the second time).
        root._get_fsdp_state()._lazy_init()
    for unit in found:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in found:
            unit.set_reshard_after_forward(True, recurse=False)
            unit.reshard()


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's full value (a collective); any other tensor unchanged."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
