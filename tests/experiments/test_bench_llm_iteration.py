"""experiments/bench/bench_llm_iteration.py runs end to end on a tiny HF model: both paths collect the same rows,
and the new path (tree prefill, merged LoRA sampling, micro-batches, shared prompt runs, rollout log-probs) gives the old path's first-step gradients
and old log-probs within float rounding. It guards the benchmark against the module's refactors (a renamed
attribute once broke it silently). Slow-marked (about 30 s, the default suite's slowest test at 4a88436): CI
runs it with `make test-slow`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hf_tiny import build_tiny_hf_model

BENCH = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "bench_llm_iteration.py"


@pytest.mark.slow
def test_the_benchmark_compares_both_paths_on_the_same_rows(tmp_path):
    model = build_tiny_hf_model(tmp_path / "qwen2", hidden_size=64, num_layers=2)
    overrides = [
        "model=hf",
        f"model.path={model}",
        "env=household",
        "env.max_turns=3",
        "rollout.groups=2",
        "rollout.group_size=3",
        "rollout.max_new_tokens=4",
        "rollout.top_p=1.0",
        "trainer.minibatch_size=6",
        "model.lora.enabled=true",
        "model.lora.r=4",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--micro-batch-size", "3", "--", *overrides],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    old, new = result["old"], result["new"]
    assert old["rows_sha256"] == new["rows_sha256"] and old["rows"] == new["rows"] >= 6
    assert new["shared_prefix"] and new["micro_batch_size"] == 3 and new["reuse_rollout_logprobs"]
    assert new["prefill"] == "tree" and new["merge_lora"]
    # the tree prefill and merged sampling gave this tiny model's rollout the old path's very tokens
    assert new["own_rows_sha256"] == old["own_rows_sha256"] and new["response_tokens_differ"] == 0
    assert result["diffs"]["grad"] <= 1e-5 * max(1.0, result["diffs"]["grad_scale"])
    assert result["diffs"]["logprobs"] <= 1e-4  # the engine's sampling log-probs against a rescoring pass
    assert "same rows: True" in proc.stdout
