"""experiments/bench/plot_curves.py draws seed-robustness rows, and refuses rows without their env steps."""

from __future__ import annotations

import json

import pytest
from experiment_scripts import load_script

plot_curves = load_script("bench/plot_curves.py")


def _rows(path):
    rows = [
        {"seed": 0, "evals": [0.0, 0.5, 1.0], "eval_steps": [0.0, 640.0, 1280.0], "rollouts": [0.1, 0.6]},
        {"seed": 1, "evals": [0.0, 0.0, 0.9], "eval_steps": [0.0, 700.0, 1300.0], "rollouts": [0.0, 0.2]},
    ]
    path.write_text(json.dumps({"name": "demo", "rows": rows}))
    return path


def test_the_curves_are_read_per_seed_and_drawn(tmp_path):
    name, seeds, rollouts = plot_curves.curves(_rows(tmp_path / "a.json"))
    assert (
        name == "demo" and seeds[1] == ([0.0, 700.0, 1300.0], [0.0, 0.0, 0.9]) and rollouts[1] == [0.0, 0.2]
    )
    out = tmp_path / "curves.png"
    plot_curves.main([str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rows_without_env_steps_are_refused_in_one_line(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"name": "old", "rows": [{"seed": 3, "evals": [0.0, 1.0]}]}))
    with pytest.raises(SystemExit, match="seed 3 has no eval_steps"):
        plot_curves.curves(path)
    with pytest.raises(SystemExit, match="without its env steps"):
        plot_curves.curves(_nan(tmp_path / "nan.json"))


def _nan(path):
    path.write_text(
        json.dumps({"name": "n", "rows": [{"seed": 0, "evals": [1.0], "eval_steps": [float("nan")]}]})
    )
    return path
