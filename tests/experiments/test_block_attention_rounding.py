"""experiments/bench/block_attention_rounding.py measures what the block-attention test's tolerance rests on:
it must see zero drift on identical paths, a nonzero rounding drift on the blocked path, and catch a wrong mask."""

from __future__ import annotations

import re

import torch
from experiment_scripts import load_script

rounding = load_script("bench/block_attention_rounding.py")


def test_in_eps_is_the_largest_difference_over_the_scale():
    dense = torch.tensor([2.0, -4.0, 1.0])
    blocked = dense + torch.tensor([0.0, 3 * rounding.EPS * 4.0, 0.0])
    assert abs(rounding.in_eps(dense, blocked) - 3.0) < 1e-3
    assert rounding.in_eps(torch.zeros(3), torch.zeros(3)) == 0.0


def test_a_flipped_mask_entry_changes_the_output_and_the_blocked_path_only_rounds():
    dense, blocked = rounding.attend_both(12, 3, 4, 0.5, seed=7, flip=False)
    assert all(rounding.in_eps(d, b) < 64 for d, b in zip(dense, blocked, strict=True))
    dense, wrong = rounding.attend_both(12, 3, 4, 0.5, seed=7, flip=True)
    assert rounding.in_eps(dense[0], wrong[0]) > 1e4  # a wrong mask is off by far more than rounding


def test_the_report_prints_the_worst_drift_and_the_catch_rate(capsys):
    rounding.main(["--draws", "20", "--seed", "3"])
    out = capsys.readouterr().out
    worst = [float(m) for m in re.findall(r"^(?:output|grad of \S+)\s+([\d.]+)", out, re.M)]
    assert len(worst) == 3 and max(worst) < 64
    caught, flippable = map(int, re.search(r"in (\d+)/(\d+) draws", out).groups())
    assert flippable > 0 and caught == flippable
