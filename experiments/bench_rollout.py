"""Rollout throughput: the torch KV-cache engine vs Hugging Face ``model.generate``, side by side.

Both sample from the same tiny random Qwen2 (hidden 128, 2 heads of 64, 1 KV head: the smallest shape vLLM's
CPU backend accepts) with the same settings (temperature, top_p, no top-k, the policy's stop ids) and both
return the sampling log-probs. Two measurements per engine, timed in turn (A B C A B C ...) so that load from
other processes hits all engines alike:

- tokens/s: one ``generate`` over a turn-0 collection batch (B groups x G identical FrozenLake prompts),
  generated tokens / wall time;
- env steps/s: a full ``Collector.collect`` of B x G FrozenLake episodes, env steps / wall time.

The torch engine is also run with ``share_prefill=False`` (plain left-padded prefill), which shows how much
of its lead comes from running identical prompts and the common prefix once. The random model never learns to
stop, so it fills its 32-token budget every turn and the HF prompts grow with that noise in the history:
later turns are prefill-bound on distinct text, where both engines do the same work.
The tiny from-scratch GPT policy (one action word per turn) is measured with the torch engine for reference.
When ``vllm`` is importable (``.venv-vllm``, see ``make test-vllm``) the ``VLLMEngine`` of ``rollout=vllm``
joins the same interleaved measurement (both columns): float32, eager, its engine core in this process. vLLM's
CPU worker pins this process's OpenMP threads when it starts, so it is started before any timing and every
engine runs under the same pinning.

Usage::

    .venv/bin/python experiments/bench_rollout.py                      # B=8 G=8, 32 new tokens, history 2
    .venv/bin/python experiments/bench_rollout.py --history-window 0 --threads 2 --repeats 5
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python experiments/bench_rollout.py   # + the vLLM column
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hf_tiny import build_tiny_hf_model  # noqa: E402

from gigpo_lab.envs import make_env  # noqa: E402
from gigpo_lab.policy import build_hf_policy, build_tiny_policy  # noqa: E402
from gigpo_lab.rollout import GenerationOutput, SamplingParams, TorchEngine  # noqa: E402
from gigpo_lab.rollout.collector import Collector  # noqa: E402
from gigpo_lab.rollout.episodes import left_pad  # noqa: E402


class HFGenerateEngine:
    """The baseline: ``model.generate`` with the engine protocol (sampling log-probs from the processed scores)."""

    def __init__(self, policy, sampling: SamplingParams):
        self.policy, self.sampling = policy, sampling

    @torch.no_grad()
    def generate(self, prompt_ids, prompt_mask, *, greedy=False, generator=None) -> GenerationOutput:
        policy, s = self.policy, self.sampling
        out = policy.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask.long(),
            do_sample=not greedy,
            temperature=s.temperature,
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
        is_stop = torch.isin(response, torch.tensor(policy.stop_ids()))
        mask = (is_stop.long().cumsum(1) - is_stop.long()) == 0  # up to and including the first stop
        response = response.masked_fill(~mask, policy.tokenizer.pad_id)
        texts = [policy.tokenizer.decode(r[m].tolist()) for r, m in zip(response, mask, strict=True)]
        return GenerationOutput(response, mask, logp.masked_fill(~mask, 0.0), texts)

    def sync_weights(self, policy) -> None:
        """Shares the module."""


def interleaved(fns: dict[str, object], repeats: int) -> dict[str, tuple[float, object]]:
    """Median wall time of ``repeats`` calls after one warm-up call each, the functions called in turn
    (A B C A B C ...) so that load from other processes hits them alike; median time and last result per name."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(times[name]), results[name]) for name in fns}


def frozenlake_prompts(policy, n: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First-turn prompts of n random-map FrozenLake episodes, ``group_size`` per seed (as ``collect``
    builds them), left-padded."""
    env = make_env("gigpo_lab/FrozenLake-v0", max_turns=10, random_map=True)
    prompts = []
    for i in range(n):
        obs, info = env.reset(seed=i // group_size)
        prompts.append(policy.build_prompt(obs, info["anchor"], []))
    return left_pad(prompts, policy.tokenizer.pad_id)


def measure(runs: dict[str, tuple[object, object]], args) -> dict[str, tuple[float, float]]:
    """Per run name (policy, engine): (tokens/s of one generate over the batch, env steps/s of one collect)."""
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
    return {
        name: (
            float(generated[name][1].response_mask.sum()) / generated[name][0],
            len(collected[name][1][0]) / collected[name][0],
        )
        for name in runs
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
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up (median)")
    parser.add_argument("--history-window", type=int, default=2, help="HF prompt's past turns (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sampling = SamplingParams(args.temperature, args.top_p, args.max_new_tokens)

    vocabulary = make_env("gigpo_lab/FrozenLake-v0", max_turns=1).unwrapped.vocabulary()
    tiny = build_tiny_policy(vocabulary)
    tiny_sampling = SamplingParams(args.temperature, args.top_p, tiny.default_max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_hf_model(Path(tmp) / "qwen2", hidden_size=128, num_heads=2, num_kv_heads=1)
        hf = build_hf_policy(str(path), history_window=args.history_window)
        runs = {
            "torch": (hf, TorchEngine(hf, sampling)),
            "torch-plain": (hf, TorchEngine(hf, sampling, share_prefill=False)),
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
        f"batch {n} rows (B={args.groups} x G={args.group_size}), FrozenLake prompts, "
        f"temperature {args.temperature}, top_p {args.top_p}, {args.threads} torch threads, "
        f"median of {args.repeats}; tiny-qwen2: {sum(p.numel() for p in hf.parameters()):,} params, "
        f"{args.max_new_tokens} new tokens, history {args.history_window}; tiny-gpt: {sum(p.numel() for p in tiny.parameters()):,} params, 1 new token"
    )
    (torch_tok, torch_steps), (plain_tok, plain_steps) = result["torch"], result["torch-plain"]
    (hf_tok, hf_steps), (tiny_tok, tiny_steps) = result["hf"], result["tiny"]
    vllm_tok, vllm_steps = result.get("vllm", (None, None))
    header = (
        f"{'model':<11} {'metric':<12} {'torch-kv':>9} {'hf-generate':>12} {'ratio':>6} "
        f"{'torch-kv, no prefill sharing':>29} {'ratio':>6} {'vllm':>9} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for metric, ours, plain, base, other in (
        ("tokens/s", torch_tok, plain_tok, hf_tok, vllm_tok),
        ("env steps/s", torch_steps, plain_steps, hf_steps, vllm_steps),
    ):
        vllm_cells = f"{'n/a':>9} {'':>6}" if other is None else f"{other:>9,.0f} {other / base:>5.1f}x"
        print(
            f"{'tiny-qwen2':<11} {metric:<12} {ours:>9,.0f} {base:>12,.0f} {ours / base:>5.1f}x "
            f"{plain:>29,.0f} {plain / base:>5.1f}x {vllm_cells}"
        )
    print(f"{'tiny-gpt':<11} {'tokens/s':<12} {tiny_tok:>9,.0f} {'n/a':>12}")
    print(f"{'tiny-gpt':<11} {'env steps/s':<12} {tiny_steps:>9,.0f} {'n/a':>12}")
    if vllm_tok is None:
        print("vllm: not installed (run from .venv-vllm for the vLLM column)")


if __name__ == "__main__":
    main()
