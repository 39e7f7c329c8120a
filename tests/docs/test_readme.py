"""The README's promises: its estimator snippet runs and agrees with the estimator, and CI runs its test command."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from gigpo_lab.algorithm import compute_advantages

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_estimator_snippet_runs_and_gives_gigpo():
    section = README.split("## Use the estimators in your own trainer", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(code, scope)  # the user's copy-paste, as written
    adv = scope["adv"]
    assert adv.shape == (5,) and adv.dtype == torch.float32
    again = compute_advantages(
        "gigpo",
        rewards=torch.tensor([0.0, 0.0, 10.0, 0.0, 10.0]),
        group_ids=torch.zeros(5, dtype=torch.long),
        traj_ids=torch.tensor([0, 0, 0, 1, 1]),
        step_ids=torch.tensor([0, 1, 2, 0, 1]),
        anchor_ids=torch.tensor([0, 1, 2, 0, 2]),
    )  # the documented defaults are ω = 1, γ = 0.95, mean_norm
    assert torch.equal(adv, again)
    # both trajectories succeed at the end: equal returns, so the episode level is 0 and only steps differ
    assert adv[2] == adv[4] == 0.0


def test_ci_runs_the_readme_test_command():
    assert "make test   #" in README and "make demo   #" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
