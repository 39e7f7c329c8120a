"""experiments/zero_shot.py's ``save``: two benchmarks written into one file by two processes at once keep both
rows, and a benchmark's later row replaces its earlier one."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import zero_shot  # noqa: E402


def _write_many(benchmark: str, out: str, n: int, start) -> None:
    start.wait(60)  # both processes write at the same time
    for i in range(n):
        zero_shot.save({"benchmark": benchmark, "i": i}, Path(out))


def test_two_processes_saving_into_one_file_keep_both_rows(tmp_path):
    out = tmp_path / "rows.json"
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(2)
    benchmarks = ("twx_cookingworld", "scienceworld")
    procs = [ctx.Process(target=_write_many, args=(b, str(out), 1000, start)) for b in benchmarks]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.exitcode is None:
            p.terminate()
        assert p.exitcode == 0
    rows = json.loads(out.read_text())
    assert sorted(r["benchmark"] for r in rows) == ["scienceworld", "twx_cookingworld"]
    assert all(r["i"] == 999 for r in rows)
