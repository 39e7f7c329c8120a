# Sourced by experiments/gpu_check.sh and experiments/gpu_run.sh: one timed step with the GPU's peak memory.
#
#   timed_with_peak SAMPLES_FILE LIMIT_S COMMAND...
# runs COMMAND under `timeout LIMIT_S`; where nvidia-smi answers, it samples the memory in use every 250 ms into
# SAMPLES_FILE meanwhile (PyTorch's cache included). Sets `rc` (the command's exit status) and `peak` (MiB, or
# empty without nvidia-smi), and removes SAMPLES_FILE.
timed_with_peak() {
    local samples=$1 limit=$2 smi=""
    shift 2
    peak=""
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 >"$samples" 2>/dev/null &
        smi=$!
    fi
    timeout "$limit" "$@"
    rc=$?
    if [ -n "$smi" ]; then
        kill "$smi" 2>/dev/null
        wait "$smi" 2>/dev/null
        peak=$(sort -n "$samples" | tail -1)
        rm -f "$samples"
    fi
}
