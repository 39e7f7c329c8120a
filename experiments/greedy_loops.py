"""Where a checkpoint's greedy policy loops, and the policy's action probabilities there.

    python experiments/greedy_loops.py --ckpt runs/taxi/seed1/run/checkpoints/last.ckpt -- \
        env=taxi trainer.iterations=200 seed=1

Pass the overrides the run was trained with (the env, the model, the seed), so that the policy, its
vocabulary and the env are built as they were. It plays ``--episodes`` held-out evaluation episodes (the
seeds ``gigpo-lab train`` evaluates on) greedily and sampled, prints both success rates, and for each failed
greedy episode the first cycle of states (``gigpo_lab.analysis.loops``): state, action, next state and, for
the tiny policy, the probability of every action. docs/notebook/2026-11_seed_robustness.md reads Taxi's loops with it.
"""

from __future__ import annotations

import argparse
import json
import sys


def report(ckpt: str, overrides: list[str], episodes: int = 16, sample_seed: int = 0) -> dict:
    """Greedy and sampled success over ``episodes`` held-out seeds, and the greedy loops (see the module doc)."""
    import torch

    from gigpo_lab.analysis.loops import greedy_loops
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.rollout.episodes import run_episodes
    from gigpo_lab.train import build
    from gigpo_lab.training.seeds import EVAL_SEED_BASE

    cfg = compose_config(overrides)
    module = build(cfg)
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    module.restore_frozen(checkpoint, ckpt)  # a light checkpoint (trainer.checkpoint_frozen_base=false)
    module.load_state_dict(checkpoint["state_dict"])
    module.policy.eval()
    envs = [module.collector.env_fn() for _ in range(episodes)]
    seeds = [EVAL_SEED_BASE + i for i in range(episodes)]
    gen = torch.Generator().manual_seed(sample_seed)
    with torch.no_grad():
        turns, success, _ = run_episodes(envs, seeds, module.policy, module.engine, None, greedy=True)
        _, sampled, _ = run_episodes(envs, seeds, module.policy, module.engine, gen, greedy=False)
    names = list(envs[0].unwrapped.action_names)
    for env in envs:
        env.close()
    return {
        "greedy_success": success.float().mean().item(),
        "sampled_success": sampled.float().mean().item(),
        "loops": greedy_loops(turns, success, module.policy, names),
    }


def _print(result: dict) -> None:
    print(f"greedy success {result['greedy_success']:.2f}, sampled success {result['sampled_success']:.2f}")
    for loop in result["loops"]:
        print(f"episode {loop['episode']}: from turn {loop['start']}, a cycle of {len(loop['cycle'])}")
        for step in loop["cycle"]:
            probs = step["probabilities"]
            shown = " ".join(f"{k} {v:.2f}" for k, v in probs.items()) if probs else ""
            print(f"  {step['state']!r} -> {step['action']!r} -> {step['next_state']!r}  {shown}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    ours, overrides = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="a checkpoint written by gigpo-lab train")
    parser.add_argument("--episodes", type=int, default=16, help="held-out episodes (default 16, as eval)")
    parser.add_argument("--json", help="also write the result to this JSON file")
    opts = parser.parse_args(ours)
    result = report(opts.ckpt, overrides, opts.episodes)
    _print(result)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
