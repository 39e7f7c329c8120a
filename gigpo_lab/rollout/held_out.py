"""Held-out episodes as a table, one row per episode, and the evaluation metrics read off it.

A table is an (E, K) float64 tensor, K = ``len(COLUMNS)``, row i the i-th episode played::

    episode   success  return  length  revisited  failed
    0         1.0      1.0     6.0     0.0        0.0
    1         0.0      0.0     8.0     1.0        0.0
    2         0.0      0.0     0.0     0.0        1.0    <- its env raised: no return, length or revisit

Every metric is read off the rows alone, so a table put together from shares played apart (on several ranks:
``gigpo_lab/training/distributed.py``, ``gather_episodes``) gives, once its rows are back in episode order,
exactly the metrics of the table one process plays.
"""

from __future__ import annotations

import torch

#: The columns of a held-out table, in order.
COLUMNS = ("success", "return", "length", "revisited", "failed")


def episode_table(
    success: torch.Tensor,
    returns: torch.Tensor,
    lengths: torch.Tensor,
    revisited: torch.Tensor,
    failed: torch.Tensor,
) -> torch.Tensor:
    """The (E, K) float64 table of E episodes from (E,) columns: success, revisited, failed bool; returns float
    (the sum of the episode's rewards); lengths int (its env steps). A failed episode's return, length and
    revisit must be 0 (its rows dropped)."""
    columns = (success, returns, lengths, revisited, failed)
    return torch.stack([c.to(torch.float64) for c in columns], dim=1)


def empty_table() -> torch.Tensor:
    """The (0, K) table of no episodes (a rank whose share is empty)."""
    return torch.zeros(0, len(COLUMNS), dtype=torch.float64)


def table_metrics(table: torch.Tensor) -> dict[str, float]:
    """The evaluation metrics of an (E, K) table: ``eval/success_rate``, ``eval/return`` and ``eval/length``,
    means over the episodes whose env did not fail; ``eval/revisit_rate``, the share of all E episodes that came
    back to a state; ``eval/env_errors``, the failed episodes."""
    col = {name: table[:, k] for k, name in enumerate(COLUMNS)}
    ok = col["failed"] == 0
    return {
        "eval/success_rate": col["success"][ok].mean().item(),
        # an episode that came back to a state: with greedy decoding of a memoryless policy, a loop
        "eval/revisit_rate": col["revisited"].mean().item() if len(table) else 0.0,
        "eval/return": col["return"][ok].mean().item(),
        "eval/length": col["length"][ok].mean().item(),
        "eval/env_errors": col["failed"].sum().item(),
    }
