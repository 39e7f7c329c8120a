"""Which fused attention kernels the update's forward (and so its backward) may use: every one but cuDNN's.

PyTorch's ``scaled_dot_product_attention`` picks a kernel per call; on H100/H200 GPUs the default choice, when a
mask is passed, is cuDNN's. Since torch 2.11 its backward returns NaN in the query gradient when three things
hold together (pytorch/pytorch#196678; reduced from a TRL DPO run in huggingface/trl#7181): an explicit
``attn_mask``, a sequence length of 64 mod 128, and a query row whose log-sum-exp is below about -88.7, which a
fully masked row (a left-padded position of a batch) always is. The forward is unaffected, so the loss stays
finite while the gradient is NaN: the failure of the lab's only GPU run (experiments/results/gpu/README.md).
Every update micro-batch of a Hugging Face policy has a mask and left padding, and its trimmed length
(``packing/microbatch.py``) is 64 mod 128 in about one chunk of 128.

The backward of an attention call runs the kernel its forward chose, so excluding cuDNN around the forward is
enough. The memory-efficient and flash kernels remain (and, on a CPU, the CPU's own), so the cost on a GPU is
cuDNN's speed-up over them on the update alone; rollouts and scoring run without gradients and keep it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager


def update_attention() -> AbstractContextManager:
    """A context in which ``scaled_dot_product_attention`` may use any backend but cuDNN's (a global switch
    while inside: torch's ``sdpa_kernel``, public since torch 2.3)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
