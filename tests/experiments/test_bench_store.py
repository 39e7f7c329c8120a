"""experiments/bench/bench_store.py at one pair: both ways of making a store run, and the table it prints holds
their medians and ratio."""

from __future__ import annotations

import os

from experiment_scripts import load_script

bench = load_script("bench/bench_store.py")


def test_one_pair_prints_both_rows_and_their_ratio(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GIGPO_LAB_CACHE", str(tmp_path / "mine"))
    bench.main(["--pairs", "1"])
    out = capsys.readouterr().out
    rows = {line[:22].strip(): line[22:].split() for line in out.splitlines()[2:]}
    migrated, copied, ratio = (
        [float(x) for x in rows[k]] for k in ("MLflow migrates", "copied template", "ratio copied/migrated")
    )
    assert all(x > 0 for x in migrated + copied)
    # the ratio of the medians, as printed (each cell rounded to 3 decimals)
    assert all(abs(r - c / m) < 2e-3 for r, c, m in zip(ratio, copied, migrated, strict=True))
    assert os.environ["GIGPO_LAB_CACHE"] == str(tmp_path / "mine")  # its own template: the caller's is kept
    assert not (tmp_path / "mine").exists()
