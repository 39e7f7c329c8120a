"""experiments/zero_shot.py's ``save``: two benchmarks written into one file by two processes at once keep both
rows, and a benchmark's later row replaces its earlier one."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import zero_shot  # noqa: E402


def _write_many(benchmark: str, out: str, n: int) -> None:
    for i in range(n):
        zero_shot.save({"benchmark": benchmark, "i": i}, Path(out))


def test_two_processes_saving_into_one_file_keep_both_rows(tmp_path):
    out = tmp_path / "rows.json"
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_write_many, args=(b, str(out), 200)) for b in ("twx_cookingworld", "scienceworld")
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = json.loads(out.read_text())
    assert sorted(r["benchmark"] for r in rows) == ["scienceworld", "twx_cookingworld"]
    assert all(r["i"] == 199 for r in rows)
