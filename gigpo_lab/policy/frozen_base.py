"""Checkpoints without the frozen base weights (``trainer.checkpoint_frozen_base=false``).

An LLM under LoRA trains a few MB of adapters on a frozen base: SmolLM2-135M in float32 is about 600 MB of a
checkpoint's 600 MB. The base comes from the model's folder and never changes, so a checkpoint may leave it out
and record its fingerprint instead. Whatever loads such a checkpoint (a resume, ``gigpo-lab export``) builds the
policy from its folder as the run did, checks the fingerprint, and puts the weights back, so the loaded module is
the saved one bit for bit.

"Frozen" is ``requires_grad=False``: the optimizer never sees these parameters. Every name a state dict holds
them under is left out (tied weights, e.g. an embedding shared with the LM head, have two).

    kept = record(policy)                                 # as the module is built
    kept = leave_out(state_dict, "policy.", kept)         # saving: the weights go, the record (+ dtypes) stays
    put_back(state_dict, policy, "policy.", kept, path)   # loading: checked, then the weights return
"""

from __future__ import annotations

import hashlib

import torch

#: Where a checkpoint's ``gigpo_lab`` entry keeps the record of what was left out.
RECORD_KEY = "frozen_base"


def frozen_parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` of the parameters that do not train, under every name (tied ones repeat)."""
    return {
        name: p.detach() for name, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad
    }


def fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """A BLAKE2b digest of the tensors' names, dtypes, shapes and bytes, in name order: equal exactly when
    the weights are equal bit for bit."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def record(module: torch.nn.Module) -> dict:
    """What a checkpoint keeps of ``module``'s frozen weights: ``{"names": [...], "fingerprint": ...}``. Taken
    as the module is built, before a precision plugin may cast it, so a resume (which loads before that cast)
    compares like with like."""
    frozen = frozen_parameters(module)
    return {"names": sorted(frozen), "fingerprint": fingerprint(frozen)}


def leave_out(state_dict: dict, prefix: str, kept: dict) -> dict:
    """Remove the frozen weights that ``kept`` (a ``record``) names, under ``prefix``, from ``state_dict``, in
    place; return ``kept`` with the dtypes they had there (``"dtypes"``), which may differ from the built
    module's where a precision plugin cast it (``lightning.precision=bf16-true``)."""
    dtypes = {n: str(state_dict.pop(prefix + n).dtype) for n in kept["names"] if prefix + n in state_dict}
    return {**kept, "dtypes": dtypes}


def put_back(state_dict: dict, module: torch.nn.Module, prefix: str, kept: dict, source: str,
             current: dict | None = None, fix: str = "build the run's own model") -> None:  # fmt: skip
    """Fill ``state_dict`` (in place) with ``module``'s own frozen weights where ``leave_out`` removed them, in
    the dtypes they were saved in, after checking that they are the ones the checkpoint was trained on.
    ``kept``: the checkpoint's record; ``current``: ``record(module)``, if the caller has it; ``fix``: how the
    caller's user builds the right model (named in the error).

    Raises:
        ValueError: ``module``'s frozen weights are not those of the checkpoint (another base model, dtype,
            LoRA layout or model settings), naming ``source`` (the checkpoint) and the fix.
    """
    current = current or record(module)
    if current["names"] != list(kept["names"]) or current["fingerprint"] != kept["fingerprint"]:
        raise ValueError(
            f"{source} was saved without its frozen weights (trainer.checkpoint_frozen_base=false), and the model "
            "built now does not have the ones it trained on (another base model, dtype, LoRA layout or model "
            f"settings); {fix}, or use a checkpoint saved with trainer.checkpoint_frozen_base=true"
        )
    dtypes = kept.get("dtypes", {})
    for name, tensor in frozen_parameters(module).items():
        saved = dtypes.get(name)
        state_dict[prefix + name] = (
            tensor.to(getattr(torch, saved.removeprefix("torch."))) if saved else tensor
        )
