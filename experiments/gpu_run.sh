#!/usr/bin/env bash
# Issue 49's run on an air-gapped GPU node (the H200: Python 3.12, torch 2.11, no network), in one command sized
# to end within 8 minutes (GPU_RUN_BUDGET_S, default 450 s of its own; each part gets what is left, up to its cap,
# in this order):
#   0. the node's `pip freeze` (node-freeze.txt, what `make wheelhouse NODE_FREEZE=...` reads), then the carried
#      wheels (.whl/, from `make wheelhouse PYTHON_VERSION=3.12 WHEELHOUSE=.whl`) installed with no index into
#      /tmp/site; the lab itself runs from this tree (its wheel in .whl/ is skipped), then an import check;
#   1. the estimators on the GPU: experiments/bench/bench_advantages.py --device cuda (estimators.md);
#   2. experiments/gpu_check.sh (up to 330 s): the gpu tests, the 0.5 B Qwen2-shaped run, lightning=fsdp,
#      throughput.md;
#   3. the default experiment with lightning=gpu (bf16-mixed), tracked into a sqlite store, in the time left (its
#      store keeps the iterations done if the budget ends it);
#   4. summary.md: each part's PASS/FAIL, time and peak GPU memory (nvidia-smi), gpu_check's parts, and per
#      training run its iterations, median seconds per iteration (rollout, advantages, update), wall time and eval.
# Big outputs (the model, stores, checkpoints) stay in $WORK; $OUT gets five small files: gpu_run.log,
# node-freeze.txt, estimators.md, throughput.md, summary.md. Nothing here reaches the network.
#
#   bash experiments/gpu_run.sh                               # on the node, from the repository root
#   GPU_RUN_PARTS="check" bash experiments/gpu_run.sh         # some parts again: any of "bench train check"
#   GPU_CHECK_TINY=1 WHEELS= PY=.venv/bin/python bash experiments/gpu_run.sh   # a CPU dry run, no install
#
# Exit status: the number of parts that failed or were skipped (no budget left).
set -u
PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-$(mktemp -d)}
WHEELS=${WHEELS-.whl}
SITE=${SITE:-/tmp/site}
BUDGET=${GPU_RUN_BUDGET_S:-450}
PARTS=${GPU_RUN_PARTS:-bench train check}
TINY=${GPU_CHECK_TINY:-0}
START=$(date +%s)
mkdir -p "$OUT" "$WORK"
export WORK  # read by the bench part's inner shell
exec > >(tee -a "$OUT/gpu_run.log") 2>&1
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
failures=0
: >"$WORK/parts.md"
source "$(dirname "${BASH_SOURCE[0]}")/gpu_timed.sh"
left() { echo $((BUDGET - ($(date +%s) - START))); }
part() { # part NAME CAP_S COMMAND...: run it within min(CAP_S, time left); PASS/FAIL, seconds, peak GPU memory
    local name=$1 limit=$2 start rc peak
    shift 2
    [ "$(left)" -lt "$limit" ] && limit=$(left)
    if [ "$limit" -lt 10 ]; then
        echo "=== $name: SKIPPED (${limit}s of the budget left)"
        echo "| $name | SKIPPED | 0 | |" >>"$WORK/parts.md"
        failures=$((failures + 1))
        return
    fi
    echo "=== $name (limit ${limit}s, $(left)s of the budget left)"
    start=$(date +%s)
    timed_with_peak "$WORK/.smi" "$limit" "$@"
    local verdict="PASS"
    [ $rc -eq 0 ] || verdict="FAIL (exit $rc)"
    echo "=== $name: $verdict in $(($(date +%s) - start)) s${peak:+, peak GPU memory $peak MiB}"
    echo "| $name | $verdict | $(($(date +%s) - start)) | ${peak:-} |" >>"$WORK/parts.md"
    [ $rc -eq 0 ] || failures=$((failures + 1))
}
wants() { [[ " $PARTS " == *" $1 "* ]]; }

echo "gpu_run $(date -u +%FT%TZ) on $(hostname), commit ${GPU_RUN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
echo "budget ${BUDGET}s, parts: $PARTS; output in $OUT, work in $WORK"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -m pip freeze >"$OUT/node-freeze.txt" 2>/dev/null
echo "node-freeze.txt: $(wc -l <"$OUT/node-freeze.txt") lines, before the wheels"

# ---------------------------------------------------------------- 0. the carried wheels, no index
if [ -n "$WHEELS" ]; then
    mapfile -t wheels < <(ls "$WHEELS"/*.whl | grep -v '/gigpo_lab-')
    part "install ${#wheels[@]} wheels from $WHEELS" 120 "$PY" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
fi
export PYTHONPATH="$PWD${WHEELS:+:$SITE}"
part "imports" 60 "$PY" - <<'EOF'
import importlib

for name in ("torch", "lightning", "transformers", "hydra", "omegaconf", "mlflow", "gymnasium", "gigpo_lab"):
    module = importlib.import_module(name)
    print(f"{name} {getattr(module, '__version__', '?')} from {module.__file__}")
import torch

print("cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.device_count(), "device(s)")
EOF
"$PY" -m pip check 2>&1 | head -20 | sed 's/^/pip check: /'

# ---------------------------------------------------------------- 1. the estimators on the GPU
DEVICE=cuda
BENCH=()
[ "$TINY" = 1 ] && DEVICE=cpu BENCH=(--sizes 2e3 --repeats 1 --copy-mib 8 --threads 1)
if wants bench; then
    part "estimators on $DEVICE" 120 bash -c 'set -o pipefail; "$0" experiments/bench/bench_advantages.py "$@" \
        | tee "$WORK/bench.txt"' "$PY" --device "$DEVICE" "${BENCH[@]}"
    { echo "# bench_advantages.py --device $DEVICE ${BENCH[*]}"; echo; echo '```'; cat "$WORK/bench.txt"; echo '```'; } \
        >"$OUT/estimators.md"
fi

# ---------------------------------------------------------------- 2. experiments/gpu_check.sh
if wants check; then
    part "experiments/gpu_check.sh" 330 env OUT="$WORK/check" PY="$PY" GPU_CHECK_TINY="$TINY" \
        bash experiments/gpu_check.sh
    cp "$WORK/check/throughput.md" "$OUT/throughput.md" 2>/dev/null
fi

# ---------------------------------------------------------------- 3. the default experiment, lightning=gpu
TRAIN=()
[ "$TINY" = 1 ] && TRAIN=(lightning.accelerator=cpu trainer.iterations=2 trainer.eval_every=1 rollout.groups=2
    rollout.group_size=2 rollout.eval_episodes=2 env.max_turns=4 lightning.num_threads=1)
if wants train; then
    part "default experiment, lightning=gpu" 150 "$PY" -m gigpo_lab.cli train lightning=gpu \
        lightning.progress_bar=false "${TRAIN[@]}" output_dir="$WORK/default" \
        tracking.uri="sqlite:///$WORK/default.db" hydra.run.dir="$WORK/hydra_default"
fi

# ---------------------------------------------------------------- 4. summary.md
"$PY" - "$WORK" "$OUT/summary.md" "$OUT/gpu_run.log" <<'EOF'
import sqlite3
import statistics
import sys
from pathlib import Path

work, out, log = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
lines = ["# gpu_run.sh", "", *[line for line in log.read_text().splitlines()[:4] if not line.startswith("===")], ""]
lines += ["| part | result | s | peak GPU MiB |", "|---|---|---|---|", *(work / "parts.md").read_text().splitlines()]
checks = [line[4:] for line in log.read_text().splitlines() if line.startswith("=== ") and ": " in line]
lines += ["", "gpu_check.sh and gpu_run.sh parts, as logged:", "", *(f"- {c}" for c in checks)]
lines += ["", "| store | model | lightning | iterations | s/iteration (rollout + adv + update, median) | rollout s | update s "
          "| rollout tokens/s | wall s | last eval success |", "|---|---|---|---|---|---|---|---|---|---|"]
for store in (work / "default.db", work / "check" / "mlflow.db"):
    if not store.exists():
        continue
    db = sqlite3.connect(store)
    for (run,) in db.execute("SELECT run_uuid FROM runs ORDER BY start_time"):
        tags = dict(db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run,)))
        params = dict(db.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run,)))
        series = {}
        for key, value, step in db.execute("SELECT key, value, step FROM metrics WHERE run_uuid = ?", (run,)):
            series.setdefault(key, {})[step] = value

        def med(key, series=series):
            return f"{statistics.median(series[key].values()):,.2f}" if key in series else "-"

        steps = sorted(series.get("time/rollout_s", {}))
        keys = ("time/rollout_s", "time/advantage_s", "time/update_s")
        per_it = [sum(series.get(k, {}).get(s, 0.0) for k in keys) for s in steps]
        evals = series.get("eval/success_rate", {})
        strategy = params.get("lightning.strategy._target_", params.get("lightning.strategy", "auto")).split(".")[-1]
        lightning = f"{params.get('lightning.accelerator')}, {params.get('lightning.precision')}, {strategy}"
        per_it = f"{statistics.median(per_it):.2f}" if per_it else "-"
        last = f"{evals[max(evals)]:.2f}" if evals else "-"
        lines.append(
            f"| {store.relative_to(work)} | {tags.get('model')} | {lightning} | {len(steps)} | {per_it} | "
            f"{med('time/rollout_s')} | {med('time/update_s')} | {med('perf/tokens_per_s')} | "
            f"{tags.get('wall_s', '-')} | {last} |"
        )
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
EOF
echo "gpu_run done in $(($(date +%s) - START)) s: $failures part(s) failed; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$failures"
