"""Export a trained HF policy from a Lightning checkpoint as a plain Hugging Face model folder.

The folder reloads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and ``AutoTokenizer``
(chat template included); LoRA adapters are merged into the weights. The checkpoint describes itself: the
policy saves how it was built (base folder, dtype, LoRA settings) as its extra state.

Usage::

    gigpo-lab export outputs/<date>/<time>/checkpoints/last.ckpt exported/
    gigpo-lab export last.ckpt exported/ --base-path /moved/base/model
    python -m gigpo_lab.policy.export last.ckpt exported/   # the same
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from gigpo_lab.policy.frozen_base import RECORD_KEY, put_back

#: Where the LightningModule keeps the policy in its state dict.
POLICY_PREFIX = "policy."


def policy_state(ckpt_path: str | Path) -> dict[str, object]:
    """The policy's entries of a Lightning checkpoint's state dict, without the ``policy.`` prefix. A
    checkpoint saved without its frozen base (``trainer.checkpoint_frozen_base=false``) lacks those weights
    (``export_hf`` puts them back)."""
    return _policy_entries(torch.load(ckpt_path, map_location="cpu", weights_only=True))


def _policy_entries(checkpoint: dict) -> dict[str, object]:
    state = checkpoint.get("state_dict", checkpoint)
    return {k[len(POLICY_PREFIX) :]: v for k, v in state.items() if k.startswith(POLICY_PREFIX)}


def export_hf(ckpt_path: str | Path, out_dir: str | Path, base_path: str | None = None) -> Path:
    """Write the checkpoint's HF policy to ``out_dir`` (safetensors, config, tokenizer); return ``out_dir``.

    Args:
        ckpt_path: a checkpoint written by ``gigpo-lab train`` with ``model=hf`` or ``model=smollm2_135m``.
        out_dir: the folder to write (created; existing files are overwritten).
        base_path: the base model folder, if it moved since training (default: the one the checkpoint names).
    Raises:
        ValueError: the checkpoint holds no HF policy (e.g. the tiny policy, which is not a transformers model).
    """
    from gigpo_lab.policy.builders import build_hf_policy

    checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    state = _policy_entries(checkpoint)
    # "_extra_state": the state-dict key under which torch stores Module.get_extra_state() (HFPolicy's build
    # arguments); a torch constant with no public name, checked by tests/test_private_apis.py
    build_args = state.pop("_extra_state", None)
    if not isinstance(build_args, dict) or "path" not in build_args:
        raise ValueError(
            f"{ckpt_path} holds no Hugging Face policy (no policy._extra_state with its base folder); only "
            "model=hf and model=smollm2_135m checkpoints export to a transformers folder"
        )
    policy = build_hf_policy(
        base_path or build_args["path"], dtype=build_args.get("dtype", "float32"), lora=build_args.get("lora")
    )
    # the critic's value head (estimator=ppo) is no part of the language model
    state = {k: v for k, v in state.items() if not k.startswith("value_head.")}
    # the record of the frozen weights a light checkpoint left out (gigpo_lab/policy/frozen_base.py)
    if (record := checkpoint.get("gigpo_lab", {}).get(RECORD_KEY, {}).get(POLICY_PREFIX)) is not None:
        put_back(
            state, policy, "", record, str(ckpt_path), fix="pass the run's base model folder as --base-path"
        )
    policy.load_state_dict({**state, "_extra_state": build_args})
    model = policy.model.merge_and_unload() if policy.lora_enabled else policy.model
    model.config.use_cache = True
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    policy.tokenizer.hf.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    """``gigpo-lab export CKPT OUT [--base-path DIR]`` (also ``python -m gigpo_lab.policy.export``)."""
    parser = argparse.ArgumentParser(prog="gigpo-lab export", description=__doc__.splitlines()[0])
    parser.add_argument("ckpt_path", help="Lightning checkpoint (e.g. <output_dir>/checkpoints/last.ckpt)")
    parser.add_argument("out_dir", help="folder to write the Hugging Face model to")
    parser.add_argument("--base-path", default=None, help="base model folder, if it moved since training")
    args = parser.parse_args(argv)
    out = export_hf(args.ckpt_path, args.out_dir, args.base_path)
    print(f"exported to {out}: AutoModelForCausalLM.from_pretrained({str(out)!r})")  # user output


if __name__ == "__main__":
    main()
