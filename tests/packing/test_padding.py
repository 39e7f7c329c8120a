"""``left_pad`` and ``unpadded``: a round trip, and ``unpadded`` against per-row boolean indexing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.packing.padding import left_pad, unpadded

token_lists = st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=12), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(token_lists, st.integers(-1, 5))
def test_unpadded_undoes_left_pad(rows, pad_id):
    ids, mask = left_pad(rows, pad_id)
    assert unpadded(ids, mask) == rows


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(0, 9), st.data())
def test_unpadded_is_each_rows_masked_tokens_for_any_mask(n, width, data):
    ids = torch.tensor(
        data.draw(
            st.lists(st.lists(st.integers(-5, 99), min_size=width, max_size=width), min_size=n, max_size=n)
        ),
        dtype=torch.long,
    ).view(n, width)
    mask = torch.tensor(
        data.draw(st.lists(st.lists(st.booleans(), min_size=width, max_size=width), min_size=n, max_size=n)),
        dtype=torch.bool,
    ).view(n, width)
    assert unpadded(ids, mask) == [row[keep].tolist() for row, keep in zip(ids, mask, strict=True)]


def test_unpadded_refuses_a_mask_it_would_misread():
    ids = torch.arange(6).view(2, 3)
    with pytest.raises(ValueError, match="bool mask of ids' shape"):
        unpadded(ids, torch.ones(2, 3, dtype=torch.long))  # an index tensor, not a mask
    with pytest.raises(ValueError, match="bool mask of ids' shape"):
        unpadded(ids, torch.ones(2, 2, dtype=torch.bool))  # compress would silently cut each row
