"""Learning curves of seed-robustness rows, one column per JSON file that ``seed_robustness.py --json`` wrote:
greedy eval success against env steps (top) and sampled success per iteration (bottom), one thin line per
seed and the mean across seeds.

    python experiments/bench/plot_curves.py a.json b.json --out curves.png [--title "..."]

The mean is taken at each evaluation index (every seed evaluates at the same iterations), over the seeds'
own env steps at that index (their mean). Rows written before the ``eval_steps`` field are refused.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def curves(path: Path) -> tuple[str, list[tuple[list[float], list[float]]], list[list[float]]]:
    """(the row's name, per seed (env steps at each eval, greedy success at each eval), per seed the sampled
    success of each iteration)."""
    data = json.loads(path.read_text())
    out = []
    for row in data["rows"]:
        if "eval_steps" not in row:
            raise SystemExit(f"{path}: seed {row['seed']} has no eval_steps; rerun seed_robustness.py on it")
        if not all(math.isfinite(x) for x in row["eval_steps"]):
            raise SystemExit(f"{path}: seed {row['seed']} has an evaluation without its env steps")
        out.append((row["eval_steps"], row["evals"]))
    return data["name"], out, [row["rollouts"] for row in data["rows"]]


def _mean(series: list[list[float]]) -> list[float]:
    """The mean across seeds at each index that every seed has."""
    return [sum(values[i] for values in series) / len(series) for i in range(min(map(len, series)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(args.files), figsize=(5 * len(args.files), 6.4), squeeze=False)
    for ax, low, path in zip(axes[0], axes[1], args.files, strict=True):
        name, seeds, rollouts = curves(path)
        for steps, evals in seeds:
            ax.plot(steps, evals, color="tab:blue", alpha=0.3, lw=1)
        ax.plot(
            _mean([s for s, _ in seeds]),
            _mean([e for _, e in seeds]),
            color="black",
            lw=2,
            label=f"mean of {len(seeds)} seeds",
        )
        ax.set(title=name, xlabel="env steps", ylabel="greedy success (held-out)", ylim=(-0.03, 1.03))
        ax.axhline(0.8, color="grey", ls=":", lw=1)
        ax.legend(loc="lower right")
        for series in rollouts:
            low.plot(range(len(series)), series, color="tab:orange", alpha=0.3, lw=1)
        mean = _mean(rollouts)
        low.plot(range(len(mean)), mean, color="black", lw=2)
        low.set(xlabel="iteration", ylabel="sampled success (training games)", ylim=(-0.03, 1.03))
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
