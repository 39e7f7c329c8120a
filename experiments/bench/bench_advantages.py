"""Benchmark: every estimator, vectorised, against a straightforward loop implementation of GiGPO.

    python experiments/bench/bench_advantages.py                 # N = 1e4, 1e5, 1e6 rows
    python experiments/bench/bench_advantages.py --quick         # N = 1e4, 1e5, fewer repeats
    python experiments/bench/bench_advantages.py --sizes 2e5,5e5 --arbitrary-ids --threads 1
    python experiments/bench/bench_advantages.py --device cuda       # N = 1e5, 1e6, 1e7 rows on the GPU

Batches look like grid-world rollouts: groups of 8 trajectories of 1-50 steps; every trajectory of a group
starts on the group's cell of a 5x5 torus and random-walks, so anchors (cells) repeat across and within
trajectories; half the trajectories succeed (reward 10 on the last step); 10 % of the actions are invalid;
the rows are shuffled. A group holds about 204 rows, so N = 1e6 needs about 4900 groups. Ids are dense
small integers as the collector emits them, or (``--arbitrary-ids``) random int64 values, which cost the
estimators one sort per id column.

The loop reference follows verl-agent's ``gigpo/core_gigpo.py`` semantics the way that code is written:
dicts keyed by group id and by (group, anchor), a backwards return loop per trajectory. It runs on two
inputs: ``loop py`` reads Python lists (about the fastest a Python loop gets) and ``loop ref`` indexes
the arrays element by element, numpy ids and torch values, as the reference code does. It is independent
of both ``gigpo_lab.algorithm`` and the test oracle; its result is checked against the vectorised
``gigpo`` (column ``max |diff|``). Above ``--loop-max-rows`` (``--ref-max-rows``) a loop is estimated from
its time per row at the largest size it ran, marked ``~``. Times: best of ``--repeats`` runs, in ms, the
device synchronised before and after each run (``torch.cuda.synchronize`` on CUDA).

``bfs vec`` and ``bfs loop``: GraphGPO's goal-distance search alone, vectorised (its code) or one Python queue per
group, on the same graph and checked equal (``graph_search.py``; issue #50: is the per-group loop worth vectorising?).

A second table sets each estimator beside its memory-bandwidth floor: the bytes of the input columns it reads
(its ``requires`` and ``optional`` columns), read once, plus its advantages written once, at the device's copy
rate, which the script measures itself: a device-to-device copy of ``--copy-mib`` MiB, bytes read plus written
over the best time. On a device other than the CPU the loops do not run (they are CPU Python), and each
estimator's result is compared with the CPU's up to ``--check-max-rows`` rows (``max |dev - cpu|``).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from gigpo_lab.algorithm import available_estimators, build_estimator, compute_advantages, group_filter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_search import time_search  # noqa: E402

GROUP_SIZE, MAX_STEPS, GRID = 8, 50, 5


def make_batch(n_rows: int, seed: int = 0, arbitrary_ids: bool = False) -> dict[str, torch.Tensor]:
    """About ``n_rows`` shuffled step rows of grid-world rollouts (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n_groups = max(1, round(n_rows / (GROUP_SIZE * (MAX_STEPS + 1) / 2)))
    n_traj = n_groups * GROUP_SIZE
    length = rng.integers(1, MAX_STEPS + 1, size=n_traj)
    traj = np.repeat(np.arange(n_traj), length)
    n = traj.size
    offset = np.cumsum(length) - length
    step = np.arange(n) - offset[traj]
    group = traj // GROUP_SIZE
    # Random walk on a torus from the group's start cell: position_t = start + sum of the moves before t.
    moves = rng.integers(-1, 2, size=(n, 2))
    before = np.cumsum(moves, axis=0) - moves  # sum of the moves before each row, over the whole batch
    walk = before - before[offset][traj]  # ... restarted at each trajectory's first step
    cell = (rng.integers(0, GRID, size=(n_groups, 2))[group] + walk) % GRID
    anchor = cell[:, 0] * GRID + cell[:, 1]
    reward = np.zeros(n)
    last = offset + length - 1
    reward[last[rng.random(n_traj) < 0.5]] = 10.0
    invalid = rng.random(n) < 0.1
    if arbitrary_ids:  # any int64 values: the estimators must sort them
        group_key = rng.choice(2**62, size=n_groups, replace=False)
        traj_key = rng.choice(2**62, size=n_traj, replace=False)
        anchor = rng.choice(2**62, size=GRID * GRID, replace=False)[anchor]
    else:  # the collector's ids: group and trajectory indices, interned anchors
        group_key, traj_key = np.arange(n_groups), np.arange(n_traj)
    perm = rng.permutation(n)
    values = rng.uniform(
        0.0, 10.0, size=n
    )  # a made-up critic for ppo (drawn last: the other columns as before)
    return {
        "rewards": torch.from_numpy(reward[perm]).to(torch.float32),
        "group_ids": torch.from_numpy(group_key[group][perm]),
        "traj_ids": torch.from_numpy(traj_key[traj][perm]),
        "step_ids": torch.from_numpy(step[perm]),
        "anchor_ids": torch.from_numpy(anchor[perm]),
        "invalid": torch.from_numpy(invalid[perm]),
        "values": torch.from_numpy(values[perm]).to(torch.float32),
    }


def loop_gigpo(
    cols: dict[str, torch.Tensor],
    as_lists: bool = True,
    omega: float = 1.0,
    gamma: float = 0.95,
    penalty: float = 0.1,
) -> torch.Tensor:
    """verl-agent GiGPO semantics with dicts and loops (mean_norm, rows, raw/zero singletons).

    as_lists: read Python lists (``loop py``); else index the arrays element by element (``loop ref``).
    """
    if as_lists:
        rewards, invalid = cols["rewards"].tolist(), cols["invalid"].tolist()
        group, traj = cols["group_ids"].tolist(), cols["traj_ids"].tolist()
        step, anchor = cols["step_ids"].tolist(), cols["anchor_ids"].tolist()
    else:
        rewards, invalid = cols["rewards"], cols["invalid"].to(cols["rewards"].dtype)
        group, traj = cols["group_ids"].numpy(), cols["traj_ids"].numpy()
        step, anchor = cols["step_ids"].numpy(), cols["anchor_ids"].numpy()
    n = len(rewards)
    episode_return = defaultdict(float)
    by_traj = defaultdict(list)
    for i in range(n):
        episode_return[traj[i]] += rewards[i]
        by_traj[traj[i]].append((step[i], i))
    # Episode level: id2score over every row of the group (compute_mean_std_cross_steps).
    score = [episode_return[traj[i]] - penalty * invalid[i] for i in range(n)]
    id2score = defaultdict(list)
    for i in range(n):
        id2score[group[i]].append(score[i])
    id2mean = {k: (sum(v) / len(v) if len(v) > 1 else 0.0) for k, v in id2score.items()}
    episode = [score[i] - id2mean[group[i]] for i in range(n)]
    # Step level: discounted return per trajectory, then (group, anchor) step groups.
    returns = [0.0] * n
    for rows in by_traj.values():
        rows.sort()
        g = 0.0
        for _, i in reversed(rows):
            g = rewards[i] + gamma * g
            returns[i] = g - penalty * invalid[i]
    step_groups = defaultdict(list)
    for i in range(n):
        step_groups[(group[i], anchor[i])].append(returns[i])
    step_mean = {k: sum(v) / len(v) for k, v in step_groups.items()}
    out = []
    for i in range(n):
        key = (group[i], anchor[i])
        a_s = 0.0 if len(step_groups[key]) == 1 else returns[i] - step_mean[key]
        out.append(float(episode[i] + omega * a_s))
    return torch.tensor(out, dtype=cols["rewards"].dtype)


def no_sync() -> None:
    """The CPU's synchronisation: nothing to wait for."""


def syncer(device: torch.device):
    """What waits for the device's queued work: ``torch.cuda.synchronize`` on CUDA."""
    return torch.cuda.synchronize if device.type == "cuda" else no_sync


def best_ms(fn, repeats: int, sync=no_sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def copy_rate(device: torch.device, mib: int, sync, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy of ``mib`` MiB, bytes read plus written, best of ``repeats``."""
    src = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    seconds = best_ms(lambda: dst.copy_(src), repeats, sync) / 1e3
    return 2 * src.nbytes / seconds


def columns_read(name: str, cols: dict[str, torch.Tensor]) -> list[str]:
    """The columns of ``cols`` that estimator ``name`` (default parameters) reads: required, then optional."""
    estimator = build_estimator(name)
    return [c for c in (*estimator.requires, *estimator.optional) if c in cols]


def floor_ms(name: str, cols: dict[str, torch.Tensor], rate: float) -> tuple[float, float]:
    """(ms, MB moved) of the memory-bandwidth floor: the columns read once, the advantages written once."""
    moved = sum(cols[c].nbytes for c in columns_read(name, cols)) + cols["rewards"].nbytes
    return 1e3 * moved / rate, moved / 1e6


def time_loop(cols, as_lists: bool, n: int, max_rows: float, per_row: float | None, repeats: int):
    """(ms, cell text, ms per row, max |loop - gigpo|) of one loop variant; estimated above ``max_rows``."""
    if n > max_rows:
        ms = per_row * n if per_row else float("nan")
        return ms, (f"~{ms:.0f}" if per_row else "-"), per_row, None
    ms = best_ms(lambda: loop_gigpo(cols, as_lists), 1 if n > 2e5 else min(repeats, 3))
    diff = (
        (loop_gigpo(cols, as_lists).double() - compute_advantages("gigpo", **cols).double())
        .abs()
        .max()
        .item()
    )
    return ms, f"{ms:.0f}", ms / n, diff


def ratio(loop_ms: float, ms: float) -> str:
    return "-" if loop_ms != loop_ms else f"{loop_ms / ms:.0f}x"  # NaN: the loop never ran


def filter_rule(rule: str, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    """One group filter (``gigpo_lab.algorithm.group_filter``) on the batch, dense ids included: (groups,) bool."""
    traj_ids, traj = torch.unique(cols["traj_ids"], return_inverse=True)
    first = torch.full((len(traj_ids),), len(traj), dtype=torch.long, device=traj.device).scatter_reduce_(
        0, traj, torch.arange(len(traj), device=traj.device), "amin"
    )
    group_ids, group_of_traj = torch.unique(cols["group_ids"][first], return_inverse=True)
    returns = group_filter.episode_returns(cols["rewards"], traj, len(traj_ids))
    if rule == "nonconstant":
        return group_filter.keep_nonconstant(returns, group_of_traj, len(group_ids))
    return group_filter.keep_top_std(
        group_filter.group_return_std(returns, group_of_traj, len(group_ids)), 0.25
    )


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s.strip()]


def timed(label: str, fn, repeats: int, sync, errors: list[str]) -> float:
    """best_ms of ``fn`` after one warm-up run; NaN (and the error kept) if it raises, so one failing cell
    does not cost the rest of a run on a borrowed GPU."""
    try:
        fn()  # warm-up
        return best_ms(fn, repeats, sync)
    except Exception as err:  # reported in the table and on stderr; the run goes on
        errors.append(f"{label}: {type(err).__name__}: {err}")
        traceback.print_exc(file=sys.stderr)
        return float("nan")


def cell(ms: float) -> str:
    """A time in ms: one decimal from 1 ms, three below (a GPU's times); ERR for a run that raised."""
    return "ERR" if ms != ms else f"{ms:.1f}" if ms >= 1 else f"{ms:.3f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    return lines + [" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=parse_sizes, default=None, help="rows, e.g. 1e4,1e5 (default: see --device)"
    )
    parser.add_argument("--quick", action="store_true", help="sizes 1e4,1e5, 2 repeats, loop ref to 1e4 rows")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cell (the best is shown)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--arbitrary-ids", action="store_true", help="random int64 ids instead of the collector's"
    )
    parser.add_argument("--loop-max-rows", type=float, default=1.5e6, help="loop py is estimated above this")
    parser.add_argument("--ref-max-rows", type=float, default=1.5e5, help="loop ref is estimated above this")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the estimators run: cpu (default; sizes 1e4,1e5,1e6) or cuda (1e5,1e6,1e7)",
    )
    parser.add_argument(
        "--copy-mib",
        type=int,
        default=None,
        help="the copy that measures the rate (1024 on cuda, 256 on cpu)",
    )
    parser.add_argument(
        "--check-max-rows", type=float, default=1e6, help="off the CPU: compare with the CPU up to this"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    if args.sizes is None:
        args.sizes = [10**4, 10**5, 10**6] if on_cpu else [10**5, 10**6, 10**7]
    if args.quick:
        args.sizes, args.repeats, args.ref_max_rows = [10**4, 10**5], 2, 2e4
    if not on_cpu:  # the loops are CPU Python: not this device's numbers
        args.loop_max_rows = args.ref_max_rows = 0
    if args.threads:
        torch.set_num_threads(args.threads)
    sync = syncer(device)
    names = list(available_estimators())
    copy_mib = args.copy_mib or (256 if on_cpu else 1024)
    rate = copy_rate(device, copy_mib, sync)
    errors: list[str] = []

    header = [
        "rows", "groups", *names, "loop py", "loop ref", "max |diff|", "py/gigpo", "ref/gigpo", "gigpo/grpo",
        "hgpo/gigpo", "graphgpo/gigpo", "bfs vec", "bfs loop", "bfs loop/vec", "ppo/gigpo", "nonconstant/gigpo",
        "top_std/gigpo",
    ]  # fmt: skip
    lines, floor_rows, py_per_row, ref_per_row = [], [], None, None
    for size in args.sizes:
        cpu_cols = make_batch(size, arbitrary_ids=args.arbitrary_ids)
        cols = {k: v.to(device) for k, v in cpu_cols.items()}
        n = len(cols["rewards"])
        times = {}
        for name in names:
            times[name] = timed(
                f"{name} at {n:,} rows",
                lambda name=name, cols=cols: compute_advantages(name, **cols),
                args.repeats,
                sync,
                errors,
            )
        for rule in ("nonconstant", "top_std"):
            times[rule] = timed(
                f"{rule} at {n:,} rows",
                lambda rule=rule, cols=cols: filter_rule(rule, cols),
                args.repeats,
                sync,
                errors,
            )
        py_ms, py_cell, py_per_row, py_diff = time_loop(
            cpu_cols, True, n, args.loop_max_rows, py_per_row, args.repeats
        )
        ref_ms, ref_cell, ref_per_row, ref_diff = time_loop(
            cpu_cols, False, n, args.ref_max_rows, ref_per_row, 1
        )
        diffs = [d for d in (py_diff, ref_diff) if d is not None]
        bfs_ms, bfs_loop_ms = time_search(cpu_cols, args.repeats) if on_cpu else (float("nan"), float("nan"))
        gigpo = times["gigpo"]
        lines.append(
            [
                f"{n:,}",
                f"{int(torch.unique(cols['group_ids']).numel()):,}",
                *(cell(times[k]) for k in names),
                py_cell,
                ref_cell,
                f"{max(diffs):.1e}" if diffs else "-",
                ratio(py_ms, gigpo),
                ratio(ref_ms, gigpo),
                f"{gigpo / times['grpo']:.2f}",
                f"{times['hgpo'] / gigpo:.2f}",  # issue #33: HGPO (K = 2) within about 2x GiGPO
                f"{times['graphgpo'] / gigpo:.2f}",  # issue #50: GraphGPO beside GiGPO
                cell(bfs_ms),  # issue #50: its graph search, vectorised ...
                cell(bfs_loop_ms),  # ... and as a per-group Python loop (CPU only)
                ratio(bfs_loop_ms, bfs_ms),
                f"{times['ppo'] / gigpo:.2f}",  # issue #33: PPO's turn-level GAE beside GiGPO
                f"{times['nonconstant'] / gigpo:.2f}",  # issue #33: the group filters (estimator-neutral)
                f"{times['top_std'] / gigpo:.2f}",
            ]
        )
        for name in names:
            floor, moved = floor_ms(name, cols, rate)
            check = "-"
            if not on_cpu and n <= args.check_max_rows and times[name] == times[name]:
                on_dev = compute_advantages(name, **cols).double().cpu()
                check = f"{(on_dev - compute_advantages(name, **cpu_cols).double()).abs().max().item():.1e}"
            floor_rows.append(
                [f"{n:,}", name, ",".join(columns_read(name, cols)), f"{moved:.1f}", cell(times[name]),
                 f"{1e3 * floor:.1f}", f"{times[name] / floor:.0f}x" if times[name] == times[name] else "-", check]
            )  # fmt: skip
        del cols, cpu_cols
        if device.type == "cuda":
            torch.cuda.empty_cache()

    ids = "arbitrary int64" if args.arbitrary_ids else "collector (dense)"
    where = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    )
    print(
        f"advantage estimators, ms, best of {args.repeats}; float32 rewards, {ids} ids; "
        f"torch {torch.__version__}, {device.type}: {where}; ~ = estimated from time per row"
    )
    print("\n".join(table(header, lines)))
    print(
        f"\nmemory-bandwidth floor: the columns read once + the advantages written once, at {rate / 1e9:,.1f} GB/s "
        f"(a {copy_mib} MiB {device.type}-to-{device.type} copy, bytes read + written, best of 10)"
    )
    floor_header = [
        "rows",
        "estimator",
        "columns read",
        "MB moved",
        "ms",
        "floor us",
        "ms/floor",
        "max |dev - cpu|",
    ]
    print("\n".join(table(floor_header, floor_rows)))
    for error in errors:
        print("ERR", error)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
