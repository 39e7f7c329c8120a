"""A small pre-LayerNorm causal transformer with a key/value cache, trained from scratch.

Shapes: N rows, T new tokens, S cached tokens, D = d_model, H heads, V vocabulary.
The cache is a list (one entry per layer) of (keys, values), each (N, H, S, D / H).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gigpo_lab.policy.base import position_ids_from_mask

KVCache = list[tuple[torch.Tensor, torch.Tensor]]
#: Queries per attention block of a packed sequence (``BlockMask``).
QUERY_BLOCK = 128
#: The fewest kept rows (N * logits_to_keep) for which the last block computes only the kept positions. BLAS
#: picks its kernels by matrix shape, and small row counts take others, which round differently: on this
#: machine's MKL, 8 to 15 kept rows gave other bits than the full layer; from 16 rows on a row's numbers do not
#: depend on the row count (tests/policy/test_tiny_gpt.py checks every count around the bound).
MIN_KEPT_ROWS = 16


@dataclass(frozen=True)
class BlockMask:
    """A sparse attention pattern of one packed row (batch 1), as query blocks that each read only the keys
    some query of theirs may see: a packed prefix tree is mostly pairs that never meet (sibling subtrees), so
    attending block by block costs about T x (block + its ancestors' tokens) instead of T x T.

    Attributes:
        spans: per block, its queries [start, end) of the T.
        keys: per block, (K_b,) int64, the keys (of the S + T) that its queries may see, ascending.
        masks: per block, (1, 1, end - start, K_b) bool, which of those keys each query sees.
    """

    spans: list[tuple[int, int]]
    keys: list[torch.Tensor]
    masks: list[torch.Tensor]

    @staticmethod
    def from_dense(allowed: torch.Tensor, block: int = QUERY_BLOCK) -> BlockMask:
        """The blocks of a dense (T, S + T) bool mask, ``block`` queries each."""
        spans, keys, masks = [], [], []
        for start in range(0, allowed.shape[0], block):
            rows = allowed[start : start + block]
            seen = rows.any(0).nonzero().squeeze(1)
            spans.append((start, start + len(rows)))
            keys.append(seen)
            masks.append(rows[:, seen][None, None])
        return BlockMask(spans, keys, masks)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention over the cached and the new tokens.

    With ``qk_norm`` the queries and keys of each head are layer-normalised before their dot product
    (QK-LayerNorm: Dehghani et al. 2023, arXiv 2302.05442; Wortsman et al. 2023, arXiv 2309.14322), which
    bounds the attention logits. Without it, a single Adam step on the rarely-used ``qkv`` weights can turn an
    attention pattern around and the policy with it (docs/WHY_RUNS_FAIL.md).
    """

    def __init__(self, d_model: int, n_heads: int, qk_norm: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        head = d_model // n_heads
        self.q_norm = nn.LayerNorm(head) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(head) if qk_norm else nn.Identity()

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (N, T, D); allowed (N, 1, T, S+T) bool; past keys/values (N, H, S, D/H) or None."""
        out, kv = self.attend(x, allowed, past)
        return self.proj(out), kv

    def attend(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor | BlockMask,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The heads' outputs (N, T, D) before the output projection, and the keys/values (N, H, S+T, D/H).
        ``allowed``: (N, 1, T, S+T) bool, or a ``BlockMask`` (N = 1)."""
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)  # (N, H, T, D/H) each; identity without qk_norm
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        if isinstance(allowed, BlockMask):
            out = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        q[:, :, start:end], k.index_select(2, keys), v.index_select(2, keys), attn_mask=mask
                    )
                    for (start, end), keys, mask in zip(
                        allowed.spans, allowed.keys, allowed.masks, strict=True
                    )
                ],
                dim=2,
            )
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return out.transpose(1, 2).reshape(n, t, d), (k, v)


class Block(nn.Module):
    """x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_heads: int, qk_norm: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, qk_norm)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, allowed, past):
        attn_out, kv = self.attn(self.ln1(x), allowed, past)
        x = x + attn_out
        return x + self.mlp(self.ln2(x)), kv

    def forward_last(self, x, allowed, past, index: torch.Tensor, tail: int = 0):
        """``forward`` whose output is wanted at K positions only: x (N, T, D) -> (K, D), the rows ``index`` (K,)
        int64 of the output flattened to (N * T, D); ``tail`` > 0 says they are each row's last ``tail``
        positions, which are then read as a strided view, as the plain rows' pass always has.

        The keys and values (every position's) and the attention are computed in full; the output projection,
        ``ln2`` and the MLP, which act on each position alone, only at the kept positions. With ``tail`` (the
        plain rows), the same bits as ``forward(...)[0].reshape(-1, D)[index]``, gradients included: the
        row-wise ops give each row the bits it has in the full batch (BLAS kernels do not depend on the row
        count from ``MIN_KEPT_ROWS`` rows on), and the parameter gradients, which sum over rows, are summed over
        all N*T rows with zero rows where the full layer's rows get zero gradient (``_KeptRowsLinear``; ``ln2``
        runs on zero-padded rows), so they add the same terms in the same order. Without it (a packed tree,
        which matches its plain rows only up to rounding anyway) the kept rows go through plain layers.
        """
        n, t, d = x.shape

        def pick(y: torch.Tensor) -> torch.Tensor:  # (N, T, D) -> the kept rows (K, D)
            return y[:, -tail:].reshape(-1, d) if tail else y.reshape(-1, d)[index]

        def linear(h: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
            if tail:
                return _KeptRowsLinear.apply(h, layer.weight, layer.bias, index, n * t)
            return layer(h)

        out, kv = self.attn.attend(self.ln1(x), allowed, past)
        x = pick(x) + linear(pick(out), self.attn.proj)
        if tail:
            h = pick(self.ln2(x.new_zeros(n * t, d).index_copy(0, index, x).view(n, t, d)))
        else:
            h = self.ln2(x)
        return x + linear(self.mlp[1](linear(h, self.mlp[0])), self.mlp[2]), kv


class _KeptRowsLinear(torch.autograd.Function):
    """``F.linear`` on K kept rows (K, in) of a layer input of ``rows`` rows, whose other rows get zero gradient.

    Backward: the input gradient of the kept rows (K, in), and the weight and bias gradients summed over all
    ``rows`` rows as the full layer's ``addmm`` backward sums them (the kept rows at ``index``, zeros
    elsewhere), so that they have the full layer's bits.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, index, rows):
        ctx.save_for_backward(x, weight, index)
        ctx.rows = rows
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight, index = ctx.saved_tensors
        grad = grad.contiguous()
        full_grad = grad.new_zeros(ctx.rows, grad.shape[1]).index_copy_(0, index, grad)
        full_x = x.new_zeros(ctx.rows, x.shape[1]).index_copy_(0, index, x)
        return grad.mm(weight), full_grad.t().mm(full_x), full_grad.sum(0), None, None


class TinyGPT(nn.Module):
    """Token + learned position embeddings, ``n_layers`` blocks, a final LayerNorm and a tied output head.

    Args:
        vocab_size: V. d_model: D. n_layers: number of blocks. n_heads: H (D % H == 0).
        max_seq_len: the largest position (prompt + response) the model can see.
        qk_norm: layer-normalise each head's queries and keys (see ``CausalSelfAttention``).
    """

    #: Compute the last block only at the positions whose logits are kept (``Block.forward_last``); False runs
    #: every position (the same bits, slower; tests compare the two).
    prune_last_block = True

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        n_layers: int = 2,
        n_heads: int = 4,
        max_seq_len: int = 256,
        qk_norm: bool = False,
    ):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, qk_norm) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.reset_parameters(n_layers)

    def reset_parameters(self, n_layers: int) -> None:
        """GPT-2 style init: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2L)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past: KVCache | None = None,
        logits_to_keep: int = 0,
    ) -> tuple[torch.Tensor, KVCache]:
        """input_ids (N, T); attention_mask (N, S+T) bool -> logits (N, k or T, V), cache grown by T.

        Each token attends to the unmasked cached/new tokens at or before it, and always to itself (so padded
        query rows stay finite; their outputs are never used).
        """
        x, cache = self._hidden(input_ids, attention_mask, past, logits_to_keep)
        return F.linear(x, self.tok_emb.weight), cache

    def last_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The final (layer-normalised) hidden state (N, D) at the last column of ``input_ids`` (N, T), no cache:
        what the value head reads at a turn's last prompt token."""
        return self._hidden(input_ids, attention_mask, None, 1)[0][:, -1]

    def _hidden(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past: KVCache | None,
        logits_to_keep: int,
    ) -> tuple[torch.Tensor, KVCache]:
        """``forward`` before the output head: ln_f of the hidden states (N, k or T, D), and the cache."""
        n, t = input_ids.shape
        total = attention_mask.shape[1]
        start = total - t
        positions = position_ids_from_mask(attention_mask)[:, start:]
        key_index = torch.arange(total, device=input_ids.device)
        query_index = key_index[start:, None]
        allowed = (key_index <= query_index) & attention_mask[:, None, None, :]
        allowed = allowed | (key_index == query_index)
        kept = None
        if self.prune_last_block and 0 < logits_to_keep < t and n * logits_to_keep >= MIN_KEPT_ROWS:
            kept = (
                torch.arange(n, device=input_ids.device)[:, None] * t
                + torch.arange(t - logits_to_keep, t, device=input_ids.device)
            ).view(-1)
        x, cache = self._run(input_ids, positions, allowed, past, kept, logits_to_keep)
        if kept is not None:
            x = x.view(n, logits_to_keep, -1)
        elif logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.ln_f(x), cache

    def prefill_packed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        keep: torch.Tensor,
        past: KVCache | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """One packed sequence: input_ids and positions (T,), allowed (T, S+T) bool (query x key, the S cached
        keys of ``past`` first), keep (K,) int64 -> logits (K, V) at the kept columns, and the packed
        sequence's cache (batch 1, S + T keys). The attention runs in query blocks over the keys each block
        needs (``BlockMask``)."""
        index = keep if self.prune_last_block and len(keep) >= MIN_KEPT_ROWS else None
        x, cache = self._run(input_ids[None], positions[None], BlockMask.from_dense(allowed), past, index)
        x = x if index is not None else x[0, keep]
        return F.linear(self.ln_f(x), self.tok_emb.weight), cache

    def _run(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        past: KVCache | None,
        kept: torch.Tensor | None,
        tail: int = 0,
    ) -> tuple[torch.Tensor, KVCache]:
        """The blocks over input_ids and positions (N, T) with the attention pattern allowed (N, 1, T, S+T):
        the hidden states (N, T, D), or with ``kept`` (K,) only those rows of them flattened, (K, D), the last
        block computing just those (``Block.forward_last``, ``tail`` as there); and the cache grown by T."""
        if positions.numel() and int(positions.max()) >= self.max_seq_len:
            raise ValueError(f"sequence longer than max_seq_len={self.max_seq_len}; raise model.max_seq_len")
        x = self.tok_emb(input_ids) + self.pos_emb(positions)
        cache: KVCache = []
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            layer_past = None if past is None else past[i]
            if i == last and kept is not None:  # only the kept positions' outputs are read
                x, kv = block.forward_last(x, allowed, layer_past, kept, tail)
            else:
                x, kv = block(x, allowed, layer_past)
            cache.append(kv)
        return x, cache
