"""LoRA adapters (peft) on a Hugging Face causal LM, and the merged weights that leave the training process.

With LoRA on, only the adapters train, and the KL reference is the same module with its adapters disabled,
so no second copy of the base model is ever made::

    policy(x)     = base(x) + (alpha / r) * B A x    adapters on  (training, sampling)
    reference(x)  = base(x)                          adapters off (``AdapterFreeReference``)

``merged_state_dict`` gives the weights a plain ``AutoModelForCausalLM`` of the base architecture would
have (``W + (alpha / r) B A``, Hugging Face names); the vLLM engine loads them and the export writes them.
peft is imported only here, when LoRA is asked for.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from gigpo_lab.policy.settings import LoraSettings

#: peft's key prefix of the wrapped model and the infix of a LoRA layer's original weight.
PEFT_PREFIX = "base_model.model."
BASE_LAYER = ".base_layer"


def apply_lora(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """``model`` wrapped by peft with fresh adapters (B = 0, so the wrapped model starts equal to ``model``);
    the base weights are frozen."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:  # pragma: no cover - peft is in the dev extra
        raise ImportError("model.lora.enabled=true needs peft: pip install 'gigpo_lab[lora]'") from err
    target = settings.target_modules
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=target if isinstance(target, str) else list(target),
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft probes ``model.is_gradient_checkpointing``, which transformers 5 deprecates with a FutureWarning
        # on every LoRA run: peft's call, nothing the user can act on; this one message is silenced here only
        warnings.filterwarnings(
            "ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        torch.manual_seed(settings.seed)
        return get_peft_model(model, config)


def is_peft(model: Any) -> bool:
    """Whether ``model`` is a peft wrapper."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def base_model(model: Any) -> torch.nn.Module:
    """The Hugging Face model inside a peft wrapper (or ``model`` itself)."""
    return model.get_base_model() if is_peft(model) else model


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """Run ``model`` as its base model inside the block (a no-op without adapters)."""
    if not is_peft(model):
        yield
        return
    with model.disable_adapter():
        yield


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The weights of ``model`` as the plain base architecture names them, LoRA deltas merged in.

    ``model`` itself is not changed (peft's ``merge_and_unload`` would merge in place). Without adapters this
    is the model's own state dict (tensors shared, not copied), read by ``module_tensors``.
    """
    if not is_peft(model):
        return module_tensors(model)
    deltas: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            for adapter in getattr(module, "active_adapters", []):
                if adapter in getattr(module, "lora_A", {}):
                    key = _hf_name(f"{name}.weight")
                    deltas[key] = deltas.get(key, 0) + module.get_delta_weight(adapter)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in module_tensors(model).items():
        if ".lora_" in name:
            continue
        key = _hf_name(name)
        out[key] = tensor + deltas[key].to(tensor.dtype) if key in deltas else tensor
    return out


def module_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors ``model.state_dict()`` holds, under its names (parameters and persistent buffers, tied ones
    under each name), read from the modules without running state-dict hooks: under FSDP2 those hooks
    reshard the weights, which inside ``gigpo_lab.training.fsdp.gathered`` would undo the gather."""
    out: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        head = f"{prefix}." if prefix else ""
        for name, param in module.named_parameters(recurse=False, remove_duplicate=False):
            out[head + name] = param.detach()
        # private: torch has no public list of a module's non-persistent buffers (register_buffer(...,
        # persistent=False), which state_dict leaves out); tests/test_private_apis.py checks it still means that
        skipped = module._non_persistent_buffers_set
        for name, buf in module.named_buffers(recurse=False, remove_duplicate=False):
            if name not in skipped:
                out[head + name] = buf.detach()
    return out


@contextlib.contextmanager
def merged_adapters(model: Any) -> Iterator[None]:
    """Inside the block ``model`` runs its base layers with the LoRA deltas added to their weights and its
    adapters off: the same function as with adapters on, up to float rounding, at the base model's cost (no
    adapter matmuls, scaling or additions). For inference only (no grad).

    The merged weights are new tensors swapped in for the base weights' data, and the original tensors are put
    back on exit, so the model is bit-for-bit what it was (unlike peft's ``merge_adapter``/``unmerge_adapter``,
    which add and subtract in place). Costs one merged copy of the adapted weights while the block runs.
    Without adapters it is a no-op.
    """
    if not is_peft(model):
        yield
        return
    swapped: list[tuple[torch.Tensor, torch.Tensor]] = []
    try:
        with torch.no_grad():
            for module in model.modules():
                if not (hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")):
                    continue
                owned = (*module.lora_A.keys(), *getattr(module, "lora_embedding_A", {}).keys())
                adapters = [a for a in getattr(module, "active_adapters", []) if a in owned]
                if not adapters:
                    continue
                weight = module.get_base_layer().weight
                merged = weight.data
                for adapter in adapters:
                    merged = _plus_delta(module, adapter, merged)
                swapped.append((weight, weight.data))
                weight.data = merged
        with model.disable_adapter():
            yield
    finally:
        for weight, original in swapped:
            weight.data = original


def _plus_delta(module: Any, adapter: str, weight: torch.Tensor) -> torch.Tensor:
    """A new tensor ``weight + (alpha / r) B A`` of a LoRA linear layer, in one fused pass (``addmm``), or by
    peft's ``get_delta_weight`` where the layer stores its weight transposed or is no plain linear layer."""
    if adapter in module.lora_A and not getattr(module, "fan_in_fan_out", False):
        lora_a, lora_b = module.lora_A[adapter], module.lora_B[adapter]
        plain = isinstance(lora_a, torch.nn.Linear) and isinstance(lora_b, torch.nn.Linear)
        if plain and (lora_b.weight.shape[0], lora_a.weight.shape[1]) == tuple(weight.shape):
            return torch.addmm(weight, lora_b.weight, lora_a.weight, alpha=module.scaling[adapter])
    return weight + module.get_delta_weight(adapter).to(weight.dtype)


def _hf_name(peft_name: str) -> str:
    """``base_model.model.model.layers.0.q_proj.base_layer.weight`` -> ``model.layers.0.q_proj.weight``."""
    name = peft_name.removeprefix(PEFT_PREFIX)
    return name.replace(BASE_LAYER, "")


class AdapterFreeReference:
    """The KL reference of a LoRA policy: the policy's own module with its adapters disabled.

    Not an ``nn.Module`` on purpose: it holds no parameters, so it adds nothing to checkpoints, to the
    optimizer or to memory. ``logprobs`` has the signature of ``Policy.logprobs``.
    """

    def __init__(self, policy: Any):
        self.policy = policy

    @torch.no_grad()
    def logprobs(self, *columns: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        with self.policy.adapters_disabled():
            return self.policy.logprobs(*columns, **kwargs)

    @torch.no_grad()
    def forward_packed(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``Policy.forward_packed`` of the base model (for ``gigpo_lab.packing.shared_prefix``)."""
        with self.policy.adapters_disabled():
            return self.policy.forward_packed(*args, **kwargs)

    @torch.no_grad()
    def prefix_kv(self, *args: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``HFPolicy.prefix_kv`` of the base model."""
        with self.policy.adapters_disabled():
            return self.policy.prefix_kv(*args)

    def eval(self) -> AdapterFreeReference:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> AdapterFreeReference:
        return self
