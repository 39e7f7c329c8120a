"""A policy's zero-shot rows on a benchmark (issue #62 item 5, the pilot of #64): sampled held-out success, and
GiGPO's step groups in one rollout iteration of the same untrained policy.

    python experiments/zero_shot.py --benchmark twx_twc --out experiments/results/benchmarks/zero_shot.json
    python experiments/zero_shot.py --benchmark scienceworld --episodes 64 -- rollout.max_new_tokens=20

``--benchmark`` is an env option; SmolLM2-135M-Instruct (float32) plays it with the prompt settings of
``LLM`` below (those of experiments/smollm2_textworld_coin.yaml: the answer opens inside ``<action>``, the
command is the text up to ``<`` or a line break, one past turn of memory), and any further Hydra overrides
after ``--``. It builds the run as ``gigpo-lab train`` would (``gigpo_lab.train.build``), then, with no update:

1. **Evaluation** (``GiGPOModule.evaluate``): ``--episodes`` dev-fold episodes (the evaluation seeds),
   sampled at ``rollout.eval_temperature`` (the lab's 0.4 unless overridden), each from its own stream.
2. **One rollout iteration** (the trainer's first: ``group_seeds(seed, 0, B)`` and ``iteration_seed(seed,
   0)``), B x G train-fold episodes at ``rollout.temperature``, and GiGPO's estimator over it: its ``adv/``
   metrics, ``adv/singleton_frac`` among them (the share of step rows whose anchor state no other row of its
   episode group visits; 1 = GiGPO's step term is GRPO's).

It appends (or replaces) the benchmark's row in ``--out``: the overrides, the commit, the seed, the ``eval/``,
``rollout/`` and ``adv/`` metrics, and the seconds of each part.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

#: The LLM's prompt and action settings (experiments/smollm2_textworld_coin.yaml's, for any text benchmark).
SYSTEM_PROMPT = (
    "You play a text game. Each turn, reply with exactly one command inside action tags and nothing else, "
    "for example: <action>look around</action>. When the observation lists admissible commands, choose one of them."
)
LLM = [
    "model=smollm2_135m",
    "model.dtype=float32",  # this CPU has no bf16 instructions (bf16 matmuls are ~55x slower here)
    f"model.system_prompt='{SYSTEM_PROMPT}'",
    "model.response_prefix='<action>'",
    "model.history_window=1",
    "env.action_pattern='^\\s*([^<\\n]*)'",
    "exploration=none",
    "estimator=gigpo",
    "estimator.invalid_action_penalty=0.0",
    "rollout.max_new_tokens=16",
    "rollout.eval_greedy_episodes=0",
]


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "gigpo_lab", "conf", "experiments/zero_shot.py"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def save(row: dict, out: Path) -> None:
    """Append ``row`` to ``out``, replacing the benchmark's earlier row.

    Two benchmarks may run at once into one file: the read and the write hold a lock on ``<out>.lock``.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = json.loads(out.read_text()) if out.exists() else []
        rows = [r for r in rows if r["benchmark"] != row["benchmark"]] + [row]
        partial = out.with_name(out.name + ".partial")
        partial.write_text(json.dumps(rows, indent=1) + "\n")
        os.replace(partial, out)  # a crash while writing leaves the rows as they were


def zero_shot(benchmark: str, episodes: int, overrides: list[str], out: Path, seed: int = 0) -> dict:
    """The row of ``benchmark`` (module doc), saved once after the evaluation and again after the rollout."""
    import torch

    from gigpo_lab.algorithm.shaping import clip_rewards
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import build
    from gigpo_lab.training.seeds import group_seeds, iteration_seed

    args = [f"env={benchmark}", f"seed={seed}", *LLM, f"rollout.eval_episodes={episodes}", *overrides]
    cfg = compose_config(args)
    t0 = time.perf_counter()
    module = build(cfg)
    torch.set_grad_enabled(False)
    t1 = time.perf_counter()
    row = {"benchmark": benchmark, "overrides": args, "commit": commit(), "seed": seed, "build_s": t1 - t0}
    row |= {k: v for k, v in module.evaluate().items() if k.startswith(("eval/", "time/"))}
    save(row, out)  # a slow rollout that is stopped keeps the evaluation
    t2 = time.perf_counter()
    module.policy.eval()
    gen = torch.Generator().manual_seed(iteration_seed(seed, 0))
    batch, rollout = module.collector.collect(group_seeds(seed, 0, module.collector.groups), gen)
    batch.rewards = clip_rewards(batch.rewards, cfg.trainer.reward_clip)
    adv = module.estimator(batch)
    row |= {k: float(v) for k, v in rollout.items()} | {k: float(v) for k, v in adv.metrics.items()}
    row["time/rollout_s"] = time.perf_counter() - t2
    row["groups"], row["group_size"] = module.collector.groups, module.collector.group_size
    save(row, out)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--benchmark", required=True, help="an env option: twx_twc, twx_cookingworld, ...")
    parser.add_argument("--episodes", type=int, default=64, help="held-out (dev-fold) episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="experiments/results/benchmarks/zero_shot.json")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after --")
    a = parser.parse_args()
    row = zero_shot(a.benchmark, a.episodes, a.overrides, Path(a.out), a.seed)
    keys = (
        "eval/success_rate",
        "eval/return",
        "eval/length",
        "rollout/success_rate",
        "rollout/invalid_rate",
        "adv/singleton_frac",
        "time/eval_s",
        "time/rollout_s",
    )
    print(json.dumps({k: row.get(k) for k in ("benchmark", *keys)}))


if __name__ == "__main__":
    main()
