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

**The evaluation is played in chunks of ``--chunk`` episodes and resumes.** After each chunk the row holds the
per-episode table so far (``eval_table``, columns ``held_out.COLUMNS``). The same command, run again, plays only
the episodes still missing and reads the metrics off the whole table; once both parts are done it changes
nothing. Episode i has its reset seed and its own sampling stream (``eval_stream_seed(seed, i)``) wherever it
is played, as on the ranks of a shared evaluation, so a chunked evaluation is the one-batch evaluation row for
row for the tiny policy on a CPU; for an LLM the rows a prompt is batched with (their padding) and the thread
count can move a logit by float rounding, and rarely a sampled token. A row of other settings, or one from
before the chunks (no table), is not touched without ``--fresh``. ``time/eval_s`` is the sum over the chunks;
``commits`` lists each commit that played a part, ``rollout_commit`` the rollout's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import torch

from gigpo_lab.rollout.held_out import COLUMNS

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


#: Overrides that change where a run writes or how many threads it uses, not what it plays: a row made with
#: other values of these is still resumed.
NOT_SETTINGS = ("lightning.num_threads=", "tracking.uri=", "output_dir=")


class RowConflict(RuntimeError):
    """``out`` holds a row of the benchmark that this command cannot resume."""


def same_settings(a: list[str], b: list[str]) -> bool:
    """Whether two override lists play the same episodes (``NOT_SETTINGS`` aside; the order counts, as it can
    in Hydra)."""

    def keep(args):
        return [x for x in args if not x.startswith(NOT_SETTINGS)]

    return keep(a) == keep(b)


def row_to_resume(benchmark: str, args: list[str], out: Path, fresh: bool = False) -> dict:
    """The benchmark's row in ``out`` to go on with, or a new one (none there, or ``fresh``).

    Raises ``RowConflict`` for a row made with other settings, or one from before the chunked evaluation (no
    ``eval_table``: its episodes cannot be told apart), rather than overwrite it; ``fresh`` replaces it."""
    rows = json.loads(out.read_text()) if out.exists() else []
    row = next((r for r in rows if r["benchmark"] == benchmark), None)
    if row is None or fresh:
        return {"benchmark": benchmark, "eval_table": [], "commits": []}
    if not same_settings(row["overrides"], args):
        raise RowConflict(
            f"{out} holds a {benchmark} row made with other settings ({' '.join(row['overrides'])}); "
            "pass --fresh to replace it, or --out another file"
        )
    if "eval_table" not in row:
        raise RowConflict(
            f"{out}'s {benchmark} row has no per-episode table (made before the chunked evaluation), so it "
            "cannot be resumed; pass --fresh to play it again, or --out another file"
        )
    return row


def play_in_chunks(module, row: dict, episodes: int, chunk: int, on_chunk) -> dict[str, float]:
    """The held-out evaluation of ``module`` (``training/evaluation.py``'s episodes, seeds and streams), played
    ``chunk`` episodes at a time from ``len(row["eval_table"])``: after each chunk its (chunk, K) rows are
    appended to ``row["eval_table"]``, its seconds added to ``row["time/eval_s"]``, and ``on_chunk(row)``
    called. Returns the metrics of the whole (episodes, K) table.

    The lab's limit on env errors (``rollout.max_env_error_rate``) holds for the whole evaluation, as in one
    batch, not for each chunk (one error in 8 would be 12%); a share of failed episodes over it raises
    ``EnvFailure`` once every episode is played and saved. A chunk whose every episode fails stops at once (the
    collector's rule for a call in which all failed: the env is broken), after the chunks before it were saved."""
    from gigpo_lab.rollout.collector import EnvFailure, too_many_errors
    from gigpo_lab.rollout.held_out import table_metrics
    from gigpo_lab.training.seeds import eval_seeds, eval_streams

    if chunk < 1:
        raise ValueError(f"--chunk {chunk}: play at least 1 episode between two saves")
    greedy, collector = module.eval_greedy, module.collector
    seeds = eval_seeds(episodes)
    table = row.setdefault("eval_table", [])
    limit, collector.max_env_error_rate = collector.max_env_error_rate, 1.0
    try:
        for start in range(len(table), episodes, chunk):
            t0 = time.perf_counter()
            mine = range(start, min(start + chunk, episodes))
            streams = None if greedy else eval_streams(module.seed, mine)
            played = collector.held_out(
                [seeds[i] for i in mine], streams, greedy=greedy, temperature=module.eval_temperature
            )
            table.extend(played.tolist())
            row["time/eval_s"] = row.get("time/eval_s", 0.0) + time.perf_counter() - t0
            on_chunk(row)
    finally:
        collector.max_env_error_rate = limit
    metrics = table_metrics(torch.tensor(table, dtype=torch.float64).reshape(-1, len(COLUMNS)))
    failed = metrics["eval/env_errors"]
    if too_many_errors(int(failed), episodes, limit):
        raise EnvFailure(
            f"{failed:.0f} of {episodes} evaluation episodes failed (> rollout.max_env_error_rate={limit}); "
            "the env's tracebacks are in the log above"
        )
    return metrics


@torch.no_grad()  # not set_grad_enabled(False): a caller's grad mode is left as it was
def zero_shot(
    benchmark: str,
    episodes: int,
    overrides: list[str],
    out: Path,
    seed: int = 0,
    chunk: int = 8,
    fresh: bool = False,
    policy: list[str] = LLM,
) -> dict:
    """The row of ``benchmark`` (module doc), played by the policy of the overrides ``policy`` (SmolLM2 by
    default): saved after every chunk of the evaluation and after the rollout. A row whose two parts are both
    done is returned as it is."""
    from gigpo_lab.algorithm.shaping import clip_rewards
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import build
    from gigpo_lab.training.seeds import group_seeds, iteration_seed

    args = [f"env={benchmark}", f"seed={seed}", *policy, f"rollout.eval_episodes={episodes}", *overrides]
    cfg = compose_config(args)
    row = row_to_resume(benchmark, args, out, fresh)
    if "time/rollout_s" in row:
        return row
    here = commit()

    def played_here(r: dict) -> None:
        if here not in r["commits"]:
            r["commits"].append(here)
        save(r, out)

    t0 = time.perf_counter()
    module = build(cfg)
    if not module.eval_greedy and module.eval_greedy_episodes > 0:
        raise ValueError(
            "rollout.eval_greedy_episodes > 0: this script plays the sampled evaluation only; set it to 0"
        )
    module.policy.eval()
    row |= {"seed": seed, "overrides": args, "build_s": time.perf_counter() - t0, "eval_chunk": chunk}
    row |= play_in_chunks(module, row, module.eval_episodes, chunk, played_here)
    # the whole table's metrics (a chunk's save has only its rows), kept if the rollout is stopped
    save(row, out)
    t2 = time.perf_counter()
    gen = torch.Generator().manual_seed(iteration_seed(seed, 0))
    batch, rollout = module.collector.collect(group_seeds(seed, 0, module.collector.groups), gen)
    batch.rewards = clip_rewards(batch.rewards, cfg.trainer.reward_clip)
    adv = module.estimator(batch)
    row |= {k: float(v) for k, v in rollout.items()} | {k: float(v) for k, v in adv.metrics.items()}
    row["time/rollout_s"] = time.perf_counter() - t2
    row["groups"], row["group_size"] = module.collector.groups, module.collector.group_size
    row["rollout_commit"] = here
    played_here(row)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--benchmark", required=True, help="an env option: twx_twc, twx_cookingworld, ...")
    parser.add_argument("--episodes", type=int, default=64, help="held-out (dev-fold) episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=8, help="evaluation episodes played between two saves")
    parser.add_argument(
        "--fresh", action="store_true", help="replace the benchmark's row in --out, not resume it"
    )
    parser.add_argument("--out", default="experiments/results/benchmarks/zero_shot.json")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after --")
    a = parser.parse_args()
    try:
        row = zero_shot(a.benchmark, a.episodes, a.overrides, Path(a.out), a.seed, a.chunk, a.fresh)
    except RowConflict as err:
        parser.exit(2, f"zero_shot.py: {err}\n")
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
