"""Policies: a tokenizer plus a causal LM (the tiny from-scratch GPT, or a local Hugging Face model).

The builders (``build_tiny_policy``, ``build_hf_policy``, the ``model`` options' targets) import without torch;
the policy classes load on first use, so composing a config never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gigpo_lab.policy.builders import build_hf_policy, build_tiny_policy
from gigpo_lab.policy.word_tokenizer import WordTokenizer

if TYPE_CHECKING:
    from gigpo_lab.policy.base import Policy
    from gigpo_lab.policy.hf import HFPolicy
    from gigpo_lab.policy.tiny import TinyPolicy

#: The classes that import torch, by the module that defines them (loaded on first access).
_LAZY = {
    "Policy": "gigpo_lab.policy.base",
    "HFPolicy": "gigpo_lab.policy.hf",
    "TinyPolicy": "gigpo_lab.policy.tiny",
}

__all__ = ["HFPolicy", "Policy", "TinyPolicy", "WordTokenizer", "build_hf_policy", "build_tiny_policy"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
