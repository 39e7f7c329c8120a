"""Build a tiny, randomly initialised Hugging Face causal LM and its tokenizer in a folder, offline.

Reusable by any test or benchmark::

    from hf_tiny import build_tiny_hf_model
    path = build_tiny_hf_model(tmp_path / "m")                  # Qwen2, chat template, ~60 k parameters
    path = build_tiny_hf_model(tmp_path / "m", arch="llama", chat_template=False)

The tokenizer is a byte-level BPE (like Qwen2's and Llama-3's, so ``AutoTokenizer``'s model-specific classes
load it unchanged and decoding is exact) trained on a few strings, with ``<|endoftext|>`` (eos and pad),
``<|im_start|>``, ``<|im_end|>`` as special tokens and ``<action>`` / ``</action>`` as single ordinary tokens.
"""

from __future__ import annotations

import string
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    string.printable,
    "<action>left</action> <action>right</action> <action>up</action> <action>down</action>",
    "You are an agent in a text game. Each turn you read an observation of the game.",
    "S F F F\nF H F H\nF F F H\nH F F G",
    "system user assistant Observation: Action:",
]


def build_tiny_tokenizer(vocab_size: int = 300, chat_template: bool = True):
    """A ``PreTrainedTokenizerFast`` (byte-level BPE: 256 byte tokens, the specials, a few merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=alphabet)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.add_tokens(["<action>", "</action>"])
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_hf_model(
    folder: str | Path,
    arch: str = "qwen2",
    chat_template: bool = True,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    seed: int = 0,
) -> Path:
    """Save a random ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` and its tokenizer to ``folder``; return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    tokenizer = build_tiny_tokenizer(chat_template=chat_template)
    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    return _save(model, tokenizer, folder)


def build_qwen2_half_b_shape(folder: str | Path, layers: int, tiny: bool = False) -> Path:
    """Save a random ``Qwen2ForCausalLM`` with Qwen2-0.5B's layer shape (hidden 896, MLP 4864, 14 heads, 2 KV
    heads, tied embeddings) and ``layers`` layers, with the tiny tokenizer, to ``folder``; return it. ``tiny``
    shrinks each layer (hidden 64, MLP 128, 2 heads, 1 KV head) for a CPU dry run. The GPU check
    (experiments/gpu_check.sh) and the bf16 probe (experiments/probes/bf16_nan.py) both build it here."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    tokenizer = build_tiny_tokenizer()
    shape = (
        dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1)
        if tiny
        else dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2)
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        num_hidden_layers=layers,
        **shape,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    return _save(model, tokenizer, folder)


def _save(model, tokenizer, folder: Path) -> Path:
    """Give ``model`` the tokenizer's end and padding ids for generation, save both to ``folder``; return it."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
