"""experiments/bench/bench_advantages.py on the CPU at a tiny size: the same code path as ``--device cuda``
(synchronised timing, the measured copy rate, the memory-bandwidth floor of every estimator), so the GPU run
meets a script that works; a failing estimator is one ERR cell, not a lost run."""

from __future__ import annotations

import torch
from experiment_scripts import load_script

bench = load_script("bench/bench_advantages.py")
TINY = ["--device", "cpu", "--sizes", "2e3", "--repeats", "1", "--copy-mib", "8", "--threads", "1"]


def test_a_tiny_cpu_run_prints_both_tables_with_every_estimator(capsys):
    assert bench.main(TINY) == 0
    out = capsys.readouterr().out
    names = list(bench.available_estimators())
    head, floor = out.split("memory-bandwidth floor:")
    assert "torch " in head and "cpu: 1 threads" in head
    assert all(name in head.splitlines()[1] for name in names)
    rows = [line.split("|") for line in floor.splitlines()[3:] if line.strip()]
    assert sorted(r[1].strip() for r in rows) == sorted(names)
    for row in rows:
        ms, floor_us, ratio = float(row[4]), float(row[5]), row[6].strip()
        assert ms > 0 and floor_us > 0 and ratio.endswith("x") and row[7].strip() == "-"  # cpu: no cpu check


def test_the_floor_is_the_columns_read_and_the_advantages_written_at_the_rate():
    cols = bench.make_batch(1000)
    n = len(cols["rewards"])
    assert bench.columns_read("grpo", cols) == ["rewards", "group_ids", "traj_ids", "invalid"]
    ms, mb = bench.floor_ms("grpo", cols, rate=1e9)
    moved = 4 * n + 8 * n + 8 * n + n + 4 * n  # rewards f32, two int64 id columns, invalid bool; f32 out
    assert mb == moved / 1e6 and abs(ms - 1e3 * moved / 1e9) < 1e-12
    assert "values" in bench.columns_read("ppo", cols) and "anchor_ids" in bench.columns_read("gigpo", cols)


def test_timing_waits_for_the_device_before_and_after_each_run():
    calls = []
    bench.best_ms(lambda: calls.append("run"), 3, sync=lambda: calls.append("sync"))
    assert calls == ["sync", "run", "sync"] * 3
    assert bench.syncer(torch.device("cpu")) is bench.no_sync
    assert bench.copy_rate(torch.device("cpu"), 1, bench.no_sync, repeats=2) > 0


def test_a_failing_estimator_is_an_err_cell_and_the_run_goes_on(monkeypatch, capsys):
    real = bench.compute_advantages

    def broken(name, **cols):
        if name == "hgpo":
            raise RuntimeError("no kernel for this device")
        return real(name, **cols)

    monkeypatch.setattr(bench, "compute_advantages", broken)
    assert bench.main(TINY) == 1
    out = capsys.readouterr().out
    assert "ERR hgpo at" in out and "no kernel for this device" in out
    assert any(
        " hgpo |" in line and "ERR" in line for line in out.split("memory-bandwidth floor:")[1].splitlines()
    )
