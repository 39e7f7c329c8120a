"""Ragged token lists as one left-padded batch: what every engine and scorer is fed."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, compress

import torch


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids (n, P) int64 left-padded with ``pad_id``, mask (n, P) bool), P = the longest."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    width = int(lengths.max()) if len(sequences) else 0
    mask = torch.arange(width) >= (width - lengths)[:, None]
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    ids[mask] = torch.tensor(list(chain.from_iterable(sequences)), dtype=torch.long)
    return ids, mask


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """The inverse of ``left_pad``: each row's tokens where ``mask`` is set, as lists; ids (n, P) int64, mask (n, P)
    bool, any layout. One ``tolist`` of each tensor, not one indexing op per row (the update and the rollout's
    prefill call this on every batch). A mask that is not bool or not of ids' shape raises ValueError."""
    if mask.dtype != torch.bool or mask.shape != ids.shape:
        raise ValueError(
            f"unpadded needs a bool mask of ids' shape {tuple(ids.shape)}, got {mask.dtype} {tuple(mask.shape)}"
        )
    return [list(compress(row, keeps)) for row, keeps in zip(ids.tolist(), mask.tolist(), strict=True)]
