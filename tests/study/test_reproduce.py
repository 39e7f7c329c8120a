"""The registered study, as a spec, reproduces its committed analysis number for number from the committed
rows and prior (issue #60, item 8): the same stream (one per family and metric, seed 20261204), the same
contrasts, the same verdicts."""

from __future__ import annotations

import json

from gigpo_lab.config_paths import config_root
from gigpo_lab.study.cli import main
from gigpo_lab.study.rows import relabel_analysis
from gigpo_lab.study.spec import load_spec

RESULTS = config_root() / "experiments" / "results" / "study"


def test_gigpo_study_analyse_reproduces_the_registered_studys_analysis(tmp_path):
    argv = [
        "analyse",
        "gigpo_claims",
        "--rows",
        str(RESULTS / "rows.json"),
        "--prior",
        str(RESULTS / "analysis.json"),
    ]
    assert main([*argv, "--report", str(tmp_path), "--quiet"]) == 0
    committed = relabel_analysis(
        load_spec("gigpo_claims").spec, json.loads((RESULTS / "analysis.json").read_text())
    )
    again = json.loads((tmp_path / "analysis.json").read_text())
    assert list(again) == list(committed)
    for name, records in committed.items():
        assert again[name] == records, (
            name
        )  # every field of every record: seeds, values, CIs, p, Holm p, verdict
    assert (
        sum(len(v) for k, v in again.items() if "/" in k) == 2 * 21
    )  # 21 contrasts in 7 families, on two metrics
