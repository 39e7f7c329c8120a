"""Policies: a tokenizer plus a causal LM (the tiny from-scratch GPT, or a local Hugging Face model)."""

from gigpo_lab.policy.base import Policy
from gigpo_lab.policy.hf import HFPolicy, build_hf_policy
from gigpo_lab.policy.tiny import TinyPolicy, build_tiny_policy
from gigpo_lab.policy.word_tokenizer import WordTokenizer

__all__ = ["HFPolicy", "Policy", "TinyPolicy", "WordTokenizer", "build_hf_policy", "build_tiny_policy"]
