"""The tiny policy's rows on TextWorldExpress (issue #62 items 2 and 5), read from the runs' MLflow stores into
``masking_rows.json``: per run its env, seed, action handling (``model.mask_inadmissible``), the sampled dev-fold
success of every evaluation (by iteration), the rollout success and invalid rates and ``adv/singleton_frac`` per iteration,
and the wall seconds.

    python experiments/results/benchmarks/masking_rows.py sqlite:////tmp/tm/sweep.db sqlite:////tmp/tm/sweep_false.db

Prints the table of README.md's "Invalid-action masking" section. The stores are the runs' own (outside the
repository) and may be gone by the next session; the JSON is the record, so the runs of the stores given are
added to the rows already there (a run read again replaces its row). Where a seed has more than one run (one
stopped, one finished), the table reads the finished one.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

OUT = Path(__file__).with_name("masking_rows.json")


def rows(uri: str) -> list[dict]:
    client = MlflowClient(uri)
    found = []
    for run in client.search_runs([e.experiment_id for e in client.search_experiments()]):
        params = run.data.params
        if "env.name" not in params:  # the multirun's parent
            continue

        def hist(key: str, run=run) -> list[list[float]]:
            return [[m.step, m.value] for m in client.get_metric_history(run.info.run_id, key)]

        found.append(
            {
                "env": params["env.name"],
                "seed": int(params["seed"]),
                "mask_inadmissible": params.get("model.mask_inadmissible", "false").lower() == "true",
                "eval_success": hist("eval/success_rate"),
                "rollout_success": hist("rollout/success_rate"),
                "rollout_invalid_rate": hist("rollout/invalid_rate"),
                "singleton_frac": hist("adv/singleton_frac"),
                "status": run.info.status,  # KILLED: stopped before its last iteration (README.md says why)
                "iterations": len(hist("rollout/invalid_rate")),
                # the run's trainer.iterations when it started: fewer than "iterations" where it was continued
                # from its checkpoint to a longer budget (README.md says which, and what that changes)
                "started_with_iterations": int(params["trainer.iterations"]),
                "wall_s": (run.info.end_time - run.info.start_time) / 1000 if run.info.end_time else None,
                "store": uri,
                "run_id": run.info.run_id,
            }
        )
    return found


def at(history: list[list[float]], step: int) -> float | None:
    return next((v for s, v in history if s == step), None)


def table(all_rows: list[dict]) -> str:
    lines = [
        "| env | action handling | seeds (iterations run) | dev success: start | after 5 | after 10 | after 30 "
        "| invalid rate, last iteration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    latest: dict[tuple, dict] = {}
    for r in sorted(all_rows, key=lambda r: (r["status"] == "FINISHED", r["iterations"])):
        latest[(r["env"], r["mask_inadmissible"], r["seed"])] = r
    groups: dict[tuple, list[dict]] = {}
    for r in latest.values():
        groups.setdefault((r["env"], r["mask_inadmissible"]), []).append(r)
    for (env, mask), group in sorted(groups.items()):

        def cell(step: int, group=group) -> str:
            values = [v for r in group if (v := at(r["eval_success"], step)) is not None]
            if not values:
                return "—"
            return f"{statistics.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"

        invalid = [r["rollout_invalid_rate"][-1][1] for r in group]
        seeds = ", ".join(f"{r['seed']} ({r['iterations']})" for r in sorted(group, key=lambda r: r["seed"]))
        lines.append(
            f"| {env} | {'admissible only' if mask else 'whole vocabulary'} | {seeds} | "
            f"{cell(0)} | {cell(5)} | {cell(10)} | {cell(30)} | {statistics.mean(invalid):.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    new = [r for uri in sys.argv[1:] for r in rows(uri)]
    kept = json.loads(OUT.read_text()) if OUT.exists() else []
    reread = {r["run_id"] for r in new}
    all_rows = [r for r in kept if r["run_id"] not in reread] + new
    all_rows.sort(key=lambda r: (r["env"], r["mask_inadmissible"], r["seed"]))
    OUT.write_text(json.dumps(all_rows, indent=1) + "\n")
    print(table(all_rows))


if __name__ == "__main__":
    main()
