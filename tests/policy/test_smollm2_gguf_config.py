"""The converted SmolLM2 folder names no GGUF quantization (its weights are plain float32; vLLM refuses a
folder whose config.json says ``quant_method: gguf``), and a folder converted before that fix is repaired on use."""

from __future__ import annotations

import json

from gigpo_lab.policy import smollm2


def test_a_cached_folder_that_names_gguf_is_repaired_on_use(tmp_path):
    config = {"model_type": "llama", "hidden_size": 576, "quantization_config": {"quant_method": "gguf"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert smollm2.ensure_smollm2(tmp_path) == tmp_path
    assert json.loads((tmp_path / "config.json").read_text()) == {"model_type": "llama", "hidden_size": 576}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    before = (tmp_path / "config.json").stat().st_mtime_ns
    smollm2.ensure_smollm2(tmp_path)
    assert (tmp_path / "config.json").stat().st_mtime_ns == before, "a clean folder is left untouched"
