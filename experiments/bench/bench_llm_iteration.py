"""One LLM training iteration, today's path against the memory-bounded one, side by side: time and peak memory
of the rollout, the old/ref scoring and the update, on the same rows.

    python experiments/bench/bench_llm_iteration.py                  # SmolLM2 + LoRA (needs `make smollm`)
    python experiments/bench/bench_llm_iteration.py --micro-batch-size 2 --no-shared-prefix --no-reuse-rollout-logprobs
    python experiments/bench/bench_llm_iteration.py -- experiments=smollm2_household_lora rollout.groups=1
    python experiments/bench/bench_llm_iteration.py -- model=hf model.path=/models/m env=household  # any model

The old path is ``trainer.micro_batch_size=0`` and ``trainer.reuse_rollout_logprobs=false`` (whole-minibatch
passes and a scoring pass after the rollout); the new one has ``--micro-batch-size`` rows a forward, runs each
micro-batch's shared prompt runs once (``trainer.shared_prefix``; ``--no-shared-prefix`` turns it off) and keeps
the torch engine's sampling log-probs as the old ones (``--no-reuse-rollout-logprobs`` rescores them in
micro-batches instead). Each path runs in a fresh process (``--worker``), so its peak resident memory is its
own. Both compose the same experiment with the same seed, so they collect the same rows and cut the same
minibatches (checked: the rows' hash). A sampling thread reads the process's resident memory (psutil) every
10 ms and keeps the peak of each phase; the bytes autograd holds for backward (the activations) are tracked in
the first minibatch. Each phase has its wall time and the process's CPU time (``process_time``: less sensitive
to other jobs on a shared machine). The table also gives the token cells each scoring pass computes, the
largest difference of the old log-probs and of the first step's gradients (float rounding only), and the load
average of the machine: on a shared machine, times are only comparable inside one run, and only roughly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: The experiment benchmarked when no overrides are given, and the overrides that make it one iteration.
DEFAULT_OVERRIDES = ["experiments=smollm2_household_lora"]
BENCH_OVERRIDES = ["trainer.iterations=1", "trainer.eval_every=0", "lightning.num_threads=1"]
PHASES = ("load", "rollout", "score", "update")


class PeakMemory:
    """A thread that samples this process's resident set size and keeps the peak per phase (bytes)."""

    def __init__(self, interval_s: float = 0.01):
        import psutil

        self.process, self.interval_s = psutil.Process(), interval_s
        self.phase, self.peaks = "load", {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self.process.memory_info().rss
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
            time.sleep(self.interval_s)

    def enter(self, phase: str) -> None:
        rss = self.process.memory_info().rss
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)
        self.phase = phase
        self.peaks[phase] = rss

    def stop(self) -> dict[str, int]:
        self.enter("done")
        self._stop.set()
        self._thread.join()
        return self.peaks


def saved_tensor_bytes(exclude: set[int]):
    """A context that tracks the bytes autograd holds for backward (the activations: distinct storages, not
    those of ``exclude``, the parameters' data pointers) and keeps their peak in ``.peak``."""
    import weakref

    import torch

    class Counter(torch.autograd.graph.saved_tensors_hooks):
        def __init__(self):
            self.live = self.peak = 0
            self._count: dict[int, int] = {}

            def release(key: int, size: int) -> None:
                self._count[key] -= 1
                if self._count[key] == 0:
                    del self._count[key]
                    self.live -= size

            def pack(t):
                try:
                    key, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
                except (RuntimeError, NotImplementedError):  # a tensor without storage
                    return t
                if key in exclude:
                    return t
                if key not in self._count:
                    self._count[key] = 0
                    self.live += size
                    self.peak = max(self.peak, self.live)
                self._count[key] += 1
                weakref.finalize(t, release, key, size)
                return t

            super().__init__(pack, lambda t: t)

    return Counter()


def padded_cells(batch, size: int) -> int:
    """Token cells (rows x columns) one scoring pass over ``batch`` computes: every row padded to the batch's
    width (size <= 0, the old path), or the distinct rows in chunks of ``size``, each trimmed."""
    from gigpo_lab.packing.microbatch import distinct_rows, length_sorted_chunks, trim_padding

    cols = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    if size <= 0:
        return len(batch) * (cols[0].shape[1] + cols[2].shape[1])
    first, _ = distinct_rows(cols)
    cols = tuple(c[first] for c in cols)
    cells = 0
    for idx in length_sorted_chunks(cols[1], cols[3], size):
        p, _, r, _ = trim_padding(*(c[idx] for c in cols))
        cells += len(idx) * (p.shape[1] + r.shape[1])
    return cells


def _rows_digest(batch) -> str:
    """A short hash of the rows' token columns."""
    digest = hashlib.sha256()
    for col in (batch.prompt_ids, batch.response_ids, batch.prompt_mask, batch.response_mask):
        digest.update(col.numpy().tobytes())
    return digest.hexdigest()[:16]


def _response_tokens_differ(a, b) -> int:
    """How many sampled tokens of two collections differ (rows and columns beyond the shorter count all)."""
    n, width = min(len(a), len(b)), min(a.response_ids.shape[1], b.response_ids.shape[1])
    same = (a.response_ids[:n, :width] == b.response_ids[:n, :width]) | ~(
        a.response_mask[:n, :width] | b.response_mask[:n, :width]
    )
    rest = int(a.response_mask[n:].sum() + b.response_mask[n:].sum())
    rest += int(a.response_mask[:n, width:].sum() + b.response_mask[:n, width:].sum())
    return int((~same).sum()) + rest


def worker(path_args: dict, overrides: list[str], out_dir: Path, rows_from: Path | None) -> dict:
    """Build the experiment and run one iteration by hand (rollout, scoring, advantages, update).

    ``path_args``: micro_batch_size, reuse, shared, prefill, merge_lora (the path's settings). The collected
    batch is saved in ``out_dir``; with ``rows_from`` the scoring and the update run on the batch saved there
    (the old path's rows) instead of this rollout's, so both paths update on the very same rows."""
    meter = PeakMemory()
    t_start = time.perf_counter()
    import torch
    from hydra.utils import instantiate

    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import build
    from gigpo_lab.training.data import shuffled_minibatches
    from gigpo_lab.training.seeds import iteration_seed

    micro_batch_size, reuse = path_args["micro_batch_size"], path_args["reuse"]
    path = [
        f"trainer.micro_batch_size={micro_batch_size}",
        f"trainer.reuse_rollout_logprobs={reuse}",
        f"trainer.shared_prefix={path_args['shared']}",
        f"trainer.shared_prefix_tokens={path_args['prefix_tokens']}",
        f"rollout.engine.prefill={path_args['prefill']}",
        f"rollout.engine.merge_lora={path_args['merge_lora']}",
    ]
    cfg = compose_config([*overrides, *BENCH_OVERRIDES, *path])
    torch.manual_seed(cfg.seed)
    instantiate(cfg.lightning).apply_threads()
    module = build(cfg)
    times = {"load": time.perf_counter() - t_start}

    meter.enter("rollout")
    cpu = {}
    t0, c0 = time.perf_counter(), time.process_time()
    gen = torch.Generator().manual_seed(iteration_seed(cfg.seed, 0))
    seeds = [cfg.seed * 10_000_000 + b for b in range(module.groups)]
    module.policy.eval()
    with torch.no_grad():
        batch, rollout = module.collector.collect(seeds, gen)
    times["rollout"], cpu["rollout"] = time.perf_counter() - t0, time.process_time() - c0
    torch.save(batch, out_dir / "batch.pt")
    torch.save(gen.get_state(), out_dir / "generator.pt")
    own_rows = _rows_digest(batch)
    if rows_from is not None:
        collected = batch
        batch = torch.load(rows_from / "batch.pt", weights_only=False)
        # the old path's RNG after its rollout: the same minibatches (a rollout that sampled differently drew
        # a different number of uniforms)
        gen.set_state(torch.load(rows_from / "generator.pt"))
        if not reuse:  # rescored below
            batch.old_logprobs = None
        tokens_differ = _response_tokens_differ(collected, batch)
    else:
        tokens_differ = 0

    meter.enter("score")
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        module.score(batch)
    times["score"], cpu["score"] = time.perf_counter() - t0, time.process_time() - c0
    batch.advantages = module.estimator(batch).advantages.to(torch.float32)

    meter.enter("update")
    t0, c0 = time.perf_counter(), time.process_time()
    module.policy.train()
    optimizer = module.configure_optimizers()
    params = [p for p in module.policy.parameters() if p.requires_grad]
    saved = 0
    weights = {p.untyped_storage().data_ptr() for p in module.policy.parameters()}
    minibatches = shuffled_minibatches(batch, module.loop.ppo_epochs, module.loop.minibatch_size, gen)
    for i, mb in enumerate(minibatches):
        optimizer.zero_grad()
        if i == 0:
            counter = saved_tensor_bytes(weights)
            with counter:
                loss = module.minibatch_loss(mb, torch.Tensor.backward)[0]
            saved = counter.peak
        else:
            loss = module.minibatch_loss(mb, torch.Tensor.backward)[0]
        loss.backward()
        if i == 0:
            torch.save(torch.cat([p.grad.flatten() for p in params]), out_dir / "grad.pt")
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.gradient_clip_val or float("inf"))
        optimizer.step()
    times["update"], cpu["update"] = time.perf_counter() - t0, time.process_time() - c0
    peaks = meter.stop()
    torch.save(batch.old_logprobs, out_dir / "old_logprobs.pt")
    return {
        "micro_batch_size": micro_batch_size,
        "reuse_rollout_logprobs": reuse,
        "shared_prefix": path_args["shared"],
        "shared_prefix_tokens": path_args["prefix_tokens"],
        "prefill": path_args["prefill"],
        "merge_lora": path_args["merge_lora"],
        "own_rows_sha256": own_rows,
        "response_tokens_differ": tokens_differ,
        "rows": len(batch),
        "minibatches": len(minibatches),
        "real_tokens": int(batch.prompt_mask.sum() + batch.response_mask.sum()),
        "scored_cells": 0 if reuse else padded_cells(batch, micro_batch_size),
        "rows_sha256": _rows_digest(batch),
        "times_s": times,
        "cpu_s": cpu,
        "peak_rss_bytes": {p: peaks.get(p, 0) for p in PHASES},
        "saved_for_backward_bytes": saved,
        "env_steps": rollout.get("rollout/env_steps", float(len(batch))),
    }


#: The old path: today's code (whole-minibatch passes, a rescoring pass, the shared-prefix prefill, adapters run).
OLD_PATH = {
    "micro_batch_size": 0,
    "reuse": False,
    "shared": False,
    "prefix_tokens": 0,
    "prefill": "shared",
    "merge_lora": False,
}


def run_path(path_args: dict, overrides: list[str], out_dir: Path, rows_from: Path | None = None) -> dict:
    """One path in a fresh process (``--worker``); returns the worker's JSON result."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--worker", json.dumps(path_args), "--out-dir", str(out_dir)]
    cmd += ["--rows-from", str(rows_from)] if rows_from is not None else []
    cmd += ["--", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def report(old: dict, new: dict, diffs: dict, loads: tuple) -> str:
    """A markdown table of the two paths, their ratios, the numeric differences and the load."""
    rows = [
        f"| | old (micro_batch_size=0, rescored, prefill=shared) | new (micro_batch_size={new['micro_batch_size']}, "
        f"{'rollout log-probs' if new['reuse_rollout_logprobs'] else 'rescored'}"
        f"{', shared prefixes' if new['shared_prefix'] else ''}, prefill={new['prefill']}"
        f"{', LoRA merged for sampling' if new['merge_lora'] else ''}) | new / old |",
        "|---|---|---|---|",
    ]
    for key, label in (("times_s", "wall"), ("cpu_s", "CPU")):
        for phase in PHASES[1:]:
            a, b = old[key][phase], new[key][phase]
            rows.append(f"| {phase} {label} time (s) | {a:.1f} | {b:.1f} | {b / max(a, 1e-9):.2f} |")
        a, b = (sum(path[key][p] for p in PHASES[1:]) for path in (old, new))
        rows.append(f"| **iteration {label} time (s)** | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    for phase in PHASES:
        a, b = old["peak_rss_bytes"][phase], new["peak_rss_bytes"][phase]
        rows.append(f"| {phase} peak RSS (GiB) | {gib(a)} | {gib(b)} | {b / a:.2f} |")
    a, b = max(old["peak_rss_bytes"].values()), max(new["peak_rss_bytes"].values())
    rows.append(f"| **process peak RSS (GiB)** | {gib(a)} | {gib(b)} | {b / a:.2f} |")
    a, b = old["saved_for_backward_bytes"], new["saved_for_backward_bytes"]
    rows.append(f"| saved for backward, 1st step (GiB) | {gib(a)} | {gib(b)} | {b / max(a, 1):.2f} |")
    a, b = old["scored_cells"], new["scored_cells"]
    rows.append(f"| token cells in the old-log-prob pass | {a} | {b} | {b / max(a, 1):.2f} |")
    lines = [
        f"rows {old['rows']} (real tokens {old['real_tokens']}), minibatches {old['minibatches']}; the new "
        f"path's rollout sampled {new['response_tokens_differ']} tokens differently (float rounding: "
        f"prefill={new['prefill']}, merge_lora={new['merge_lora']}); both paths update on the old path's rows "
        f"(same rows: {old['rows_sha256'] == new['rows_sha256']})",
        "",
        *rows,
        "",
        f"old log-probs, new vs old path: max |difference| {diffs['logprobs']:.2e}; 1st step's gradients: max |difference| "
        f"{diffs['grad']:.2e} (gradient max |g| {diffs['grad_scale']:.2e})",
        f"load average (1, 5, 15 min) before {loads[0]}, after {loads[1]}; cpu count {os.cpu_count()}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--micro-batch-size", type=int, default=4, help="rows per micro-batch of the new path (default 4)"
    )
    parser.add_argument(
        "--shared-prefix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the new path runs each micro-batch's shared prompt runs once (trainer.shared_prefix; default on)",
    )
    parser.add_argument(
        "--reuse-rollout-logprobs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the new path keeps the torch engine's log-probs as the old ones (default) or rescores the rows",
    )
    parser.add_argument(
        "--shared-prefix-tokens",
        type=int,
        default=0,
        help="the new path's trainer.shared_prefix_tokens (a micro-batch's packed-token budget; default 0 = rows)",
    )
    parser.add_argument(
        "--prefill",
        default="tree",
        choices=("plain", "shared", "tree"),
        help="the new path's rollout.engine.prefill (default tree; the old path keeps shared)",
    )
    parser.add_argument(
        "--merge-lora",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the new path samples with the LoRA adapters merged (rollout.engine.merge_lora; default on)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the path's settings, as JSON
    parser.add_argument("--out-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rows-from", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default: the SmolLM2 LoRA experiment)")
    args = parser.parse_args(argv)
    overrides = args.overrides or DEFAULT_OVERRIDES
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), overrides, args.out_dir, args.rows_from)))
        return 0
    import torch

    new_path = {
        "micro_batch_size": args.micro_batch_size,
        "reuse": args.reuse_rollout_logprobs,
        "shared": args.shared_prefix,
        "prefix_tokens": args.shared_prefix_tokens if args.shared_prefix else 0,
        "prefill": args.prefill,
        "merge_lora": args.merge_lora,
    }
    load_before = tuple(round(x, 2) for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as tmp:
        old = run_path(OLD_PATH, overrides, Path(tmp) / "old")
        print(json.dumps({"old": old}), flush=True)  # kept even if the new path fails
        new = run_path(new_path, overrides, Path(tmp) / "new", rows_from=Path(tmp) / "old")
        grads = [torch.load(Path(tmp) / p / "grad.pt") for p in ("old", "new")]
        logps = [torch.load(Path(tmp) / p / "old_logprobs.pt") for p in ("old", "new")]
    load_after = tuple(round(x, 2) for x in os.getloadavg())
    diffs = {
        "logprobs": float((logps[0] - logps[1]).abs().max()),
        "grad": float((grads[0] - grads[1]).abs().max()),
        "grad_scale": float(grads[0].abs().max()),
    }
    print(report(old, new, diffs, (load_before, load_after)))
    print(json.dumps({"old": old, "new": new, "diffs": diffs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
