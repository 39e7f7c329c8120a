"""Rollout throughput: the torch KV-cache engine vs Hugging Face ``model.generate``, side by side.

Both sample from the same tiny random Qwen2 (hidden 128, 2 heads of 64, 1 KV head: the smallest shape vLLM's
CPU backend accepts) with the same settings (temperature, top_p, no top-k, the policy's stop ids) and both
return the sampling log-probs. Two measurements per engine, timed in turn (A B C A B C ...) so that load from
other processes hits all engines alike:

- tokens/s: one ``generate`` over a turn-0 collection batch (B groups x G identical FrozenLake prompts),
  generated tokens / wall time;
- env steps/s: a full ``Collector.collect`` of B x G FrozenLake episodes, env steps / wall time.

The torch engine is also run with ``prefill="plain"`` (plain left-padded prefill), which shows how much
of its lead comes from running identical prompts and the common prefix once. The random model never learns to
stop, so it fills its 32-token budget every turn and the HF prompts grow with that noise in the history:
later turns are prefill-bound on distinct text, where both engines do the same work.
The tiny from-scratch GPT policy (one action word per turn) is measured with the torch engine for reference.
When ``vllm`` is importable (``.venv-vllm``, see ``make test-vllm``) the ``VLLMEngine`` of ``rollout=vllm``
joins the same interleaved measurement (both columns): float32, eager, its engine core in this process. vLLM's
CPU worker pins this process's OpenMP threads when it starts, so it is started before any timing and every
engine runs under the same pinning.

Each figure is reported as min / median / max over ``--repeats`` timed runs (after one warm-up), with the
load average of the machine before and after: on a shared machine the spread and the load say how far a
figure can be trusted, and only ratios measured inside one run compare. ``--smollm2`` adds the real scale,
SmolLM2-135M-Instruct (``make smollm``), torch engine against HF generate, on a smaller batch.

Usage::

    .venv/bin/python experiments/bench/bench_rollout.py                      # B=8 G=8, 32 new tokens, history 2
    .venv/bin/python experiments/bench/bench_rollout.py --history-window 0 --threads 2 --repeats 7
    .venv/bin/python experiments/bench/bench_rollout.py --smollm2 --repeats 3   # + SmolLM2-135M rows
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python experiments/bench/bench_rollout.py   # + the vLLM column
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from hf_tiny import build_tiny_hf_model  # noqa: E402

from gigpo_lab.envs import make_env  # noqa: E402
from gigpo_lab.packing.padding import left_pad  # noqa: E402
from gigpo_lab.policy import build_hf_policy, build_tiny_policy  # noqa: E402
from gigpo_lab.rollout import GenerationOutput, SamplingParams, TorchEngine  # noqa: E402
from gigpo_lab.rollout.collector import Collector  # noqa: E402


class HFGenerateEngine:
    """The baseline: ``model.generate`` with the engine protocol (sampling log-probs from the processed scores)."""

    def __init__(self, policy, sampling: SamplingParams):
        self.policy, self.sampling = policy, sampling

    @torch.no_grad()
    def generate(
        self, prompt_ids, prompt_mask, *, greedy=False, generator=None, temperature=None
    ) -> GenerationOutput:
        policy, s = self.policy, self.sampling
        out = policy.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=not greedy,
            temperature=s.temperature if temperature is None else temperature,
            top_p=s.top_p,
            top_k=0,
            max_new_tokens=s.max_new_tokens,
            eos_token_id=policy.stop_ids(),
            pad_token_id=policy.tokenizer.pad_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
        response = out.sequences[:, prompt_ids.shape[1] :]
        logp = (
            F.log_softmax(torch.stack(out.scores, 1).float(), -1).gather(-1, response[..., None]).squeeze(-1)
        )
        is_stop = torch.isin(response, torch.tensor(policy.stop_ids(), device=response.device))
        mask = (is_stop.long().cumsum(1) - is_stop.long()) == 0  # up to and including the first stop
        response = response.masked_fill(~mask, policy.tokenizer.pad_id)
        texts = [policy.tokenizer.decode(r[m].tolist()) for r, m in zip(response, mask, strict=True)]
        return GenerationOutput(response, mask, logp.masked_fill(~mask, 0.0), texts)

    def sync_weights(self, policy) -> None:
        """Shares the module."""


def interleaved(fns: dict[str, object], repeats: int) -> dict[str, tuple[list[float], object]]:
    """Wall times of ``repeats`` calls after one warm-up call each, the functions called in turn (A B C A B C
    ...) so that load from other processes hits them alike; all times and the last result per name."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: (times[name], results[name]) for name in fns}


def frozenlake_prompts(policy, n: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First-turn prompts of n random-map FrozenLake episodes, ``group_size`` per seed (as ``collect``
    builds them), left-padded."""
    env = make_env("gigpo_lab/FrozenLake-v0", max_turns=10, random_map=True)
    prompts = []
    for i in range(n):
        obs, info = env.reset(seed=i // group_size)
        prompts.append(policy.build_prompt(obs, info["anchor"], []))
    return left_pad(prompts, policy.tokenizer.pad_id)


def measure(runs: dict[str, tuple[object, object]], args) -> dict[str, dict[str, list[float]]]:
    """Per run name (policy, engine): {"tokens/s": one rate per repeat of one generate over the batch,
    "env steps/s": one rate per repeat of one collect}."""
    n = args.groups * args.group_size
    generate, collect = {}, {}
    for name, (policy, engine) in runs.items():
        prompt_ids, prompt_mask = frozenlake_prompts(policy, n, args.group_size)
        gen = torch.Generator().manual_seed(0)
        generate[name] = partial(engine.generate, prompt_ids, prompt_mask, generator=gen)
        env_fn = partial(make_env, "gigpo_lab/FrozenLake-v0", max_turns=args.max_turns, random_map=True)
        collector = Collector(env_fn, policy, engine, groups=args.groups, group_size=args.group_size)
        collect[name] = partial(collector.collect, list(range(args.groups)), gen)
    generated = interleaved(generate, args.repeats)
    collected = interleaved(collect, args.repeats)
    out = {}
    for name in runs:
        (gen_times, gen_out), (col_times, (batch, _)) = generated[name], collected[name]
        # the last result's token count for every repeat (sampling differs a little between repeats)
        tokens = float(gen_out.response_mask.sum())
        out[name] = {
            "tokens/s": [tokens / t for t in gen_times],
            "env steps/s": [len(batch) / t for t in col_times],
        }
    return out


def spread(rates: list[float]) -> str:
    """``min / median / max`` of the repeats' rates."""
    return " / ".join(
        f"{r:,.0f}" if r >= 100 else f"{r:.3g}" for r in (min(rates), statistics.median(rates), max(rates))
    )


def table(title: str, result: dict[str, dict[str, list[float]]], baseline: str = "hf") -> list[str]:
    """Markdown rows: engine, metric, min / median / max over the repeats, median ratio to ``baseline``."""
    lines = []
    for metric in ("tokens/s", "env steps/s"):
        base = statistics.median(result[baseline][metric]) if baseline in result else None
        for name, rates in result.items():
            ratio = f"{statistics.median(rates[metric]) / base:.2f}x" if base else "n/a"
            lines.append(f"| {title} | {ENGINE_NAMES[name]} | {metric} | {spread(rates[metric])} | {ratio} |")
    return lines


#: The engines' names in the table.
ENGINE_NAMES = {
    "torch": "torch engine (KV cache, shared prefill)",
    "torch-plain": "torch engine, no prefill sharing",
    "hf": "HF generate",
    "vllm": "vLLM-CPU",
    "tiny": "torch engine (tiny GPT)",
}


def vllm_engine(policy, sampling: SamplingParams):
    """The ``rollout=vllm`` engine on the policy's folder (CPU settings), or None when vllm is not installed."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return None
    from gigpo_lab.rollout.vllm_engine import build_vllm_engine

    return build_vllm_engine(
        policy,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_new_tokens=sampling.max_new_tokens,
        dtype="float32",
        enforce_eager=True,
    )


def smollm2_runs(args, sampling: SamplingParams) -> dict[str, tuple[object, object]] | None:
    """The torch engine and HF generate on SmolLM2-135M-Instruct (``make smollm``), or None without its wheel."""
    from gigpo_lab.policy import smollm2

    try:
        policy = smollm2.build_smollm2_policy(history_window=args.history_window)
    except FileNotFoundError:
        return None
    return {
        "torch": (policy, TorchEngine(policy, sampling)),
        "hf": (policy, HFGenerateEngine(policy, sampling)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8, help="B: episode groups (default 8)")
    parser.add_argument("--group-size", type=int, default=8, help="G: envs per group (default 8)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=32, help="HF model's response budget (default 32)"
    )
    parser.add_argument("--max-turns", type=int, default=5, help="FrozenLake turns per episode (default 5)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed runs after one warm-up (min/median/max)"
    )
    parser.add_argument("--history-window", type=int, default=2, help="HF prompt's past turns (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--smollm2",
        action="store_true",
        help="also SmolLM2-135M-Instruct (needs `make smollm`), torch engine vs HF generate, with B=2 x G=4 "
        "and 2 turns (--smollm2-groups/-group-size/-turns)",
    )
    parser.add_argument("--smollm2-groups", type=int, default=2)
    parser.add_argument("--smollm2-group-size", type=int, default=4)
    parser.add_argument("--smollm2-turns", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    sampling = SamplingParams(args.temperature, args.top_p, args.max_new_tokens)

    vocabulary = make_env("gigpo_lab/FrozenLake-v0", max_turns=1).unwrapped.vocabulary()
    tiny = build_tiny_policy(vocabulary)
    tiny_sampling = SamplingParams(args.temperature, args.top_p, tiny.default_max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_hf_model(Path(tmp) / "qwen2", hidden_size=128, num_heads=2, num_kv_heads=1)
        hf = build_hf_policy(str(path), history_window=args.history_window)
        runs = {
            "torch": (hf, TorchEngine(hf, sampling)),
            "torch-plain": (hf, TorchEngine(hf, sampling, prefill="plain")),
            "hf": (hf, HFGenerateEngine(hf, sampling)),
            "tiny": (tiny, TorchEngine(tiny, tiny_sampling)),
        }
        vllm = vllm_engine(hf, sampling)
        if vllm is not None:
            runs["vllm"] = (hf, vllm)
        result = measure(runs, args)
        if vllm is not None:
            vllm.close()
    n = args.groups * args.group_size
    print(
        f"tiny-qwen2 ({sum(p.numel() for p in hf.parameters()):,} params): batch {n} rows (B={args.groups} x "
        f"G={args.group_size}), {args.max_turns} turns; tiny-gpt: {sum(p.numel() for p in tiny.parameters()):,} "
        f"params, 1 new token. FrozenLake prompts, history {args.history_window}, {args.max_new_tokens} new "
        f"tokens, temperature {args.temperature}, top_p {args.top_p}, {args.threads} torch threads; "
        f"{args.repeats} repeats after a warm-up, engines interleaved\n"
    )
    print("| model | engine | metric | min / median / max | median vs HF generate |")
    print("|---|---|---|---|---|")
    for line in table("tiny-qwen2", {k: v for k, v in result.items() if k != "tiny"}):
        print(line)
    for line in table("tiny-gpt", {"tiny": result["tiny"]}):
        print(line, flush=True)
    if args.smollm2:  # printed after the tiny rows, so that those survive a slow or interrupted SmolLM2 part
        small_runs = smollm2_runs(args, sampling)
        if small_runs is None:
            print("smollm2-135m: not installed (make smollm)")
        else:
            small_args = argparse.Namespace(
                **{
                    **vars(args),
                    "groups": args.smollm2_groups,
                    "group_size": args.smollm2_group_size,
                    "max_turns": args.smollm2_turns,
                }
            )
            for line in table("smollm2-135m", measure(small_runs, small_args)):
                print(line)
            print(
                f"smollm2-135m: batch {args.smollm2_groups * args.smollm2_group_size} rows (B={args.smollm2_groups}"
                f" x G={args.smollm2_group_size}), {args.smollm2_turns} turns"
            )
    if "vllm" not in result:
        print("\nvllm: not installed (run from .venv-vllm for the vLLM rows)")
    print(
        f"\nload average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, after "
        f"{tuple(round(x, 2) for x in os.getloadavg())}; {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
