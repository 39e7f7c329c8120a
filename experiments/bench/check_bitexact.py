"""Check that two source trees train bit for bit alike: same config, same MLflow metric history.

Runs ``python -m gigpo_lab.cli train <overrides>`` once with each tree first on ``PYTHONPATH`` (one torch thread,
no progress bar, a fresh sqlite MLflow store and Hydra dir under ``--scratch``), reads every metric's full
history (step, value) back from the store, and compares them exactly, except the timing metrics
(``time/*``, ``perf/*``), which differ from run to run by nature. Exits 1 on any difference.

The base tree's histories are cached in ``--scratch`` by (tree, commit, overrides), so a fixed base (a clean
checkout) runs once per config.

Usage (from the repo root; the default configs are the ones the speed work must keep bit-exact)::

    PYTHONPATH=$PWD python experiments/bench/check_bitexact.py --base /work/base
    python experiments/bench/check_bitexact.py --base /work/base --config "trainer.iterations=3 seed=1"

Besides the metrics, the weights and optimizer state of the run's final ``last.ckpt`` are compared, tensor by
tensor (as ``ckpt/<name>`` entries holding a digest of the tensor's bytes).

A resumed run: ``--then OVERRIDES`` runs each config, then resumes it from its checkpoint ``--from`` (default
``last.ckpt``) in the same store and output folder with ``OVERRIDES`` added. From ``last.ckpt`` of a shorter run
the store holds one run whose history spans both processes; from a checkpoint written mid-run (``iter0002.ckpt``)
the resumed process re-runs the later iterations, whose metric points are already in the store, so there the
final checkpoint's tensors and counters are the check. Before it resumes, the checkpoint it resumes from is
renamed and every other one deleted, so the final ``last.ckpt`` is always the resumed process's own::

    python experiments/bench/check_bitexact.py --base /work/base \
        --config "trainer.iterations=3 exploration.anneal=6 seed=0" --then "trainer.iterations=6"
    python experiments/bench/check_bitexact.py --base /work/base \
        --config "trainer.iterations=6 trainer.checkpoint_every=1 seed=0" --then "" --from iter0002.ckpt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

#: The configs checked by default: the default estimator (GiGPO) and GRPO, 6 iterations (evals at 0 and 5).
DEFAULT_CONFIGS = ("trainer.iterations=6 seed=0", "trainer.iterations=6 seed=0 estimator=grpo")
#: Metrics that measure time, not numerics.
IGNORED_PREFIXES = ("time/", "perf/")


def tree_commit(tree: Path) -> str:
    """``git describe``-like id of ``tree``: HEAD's hash plus ``-dirty`` when it has uncommitted changes."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def quiet_overrides(tree: Path, threads: int = 1) -> list[str]:
    """``threads`` torch threads and no progress line, spelt as ``tree`` spells them (``lightning.*`` since that
    group exists, ``trainer.*`` before)."""
    group = "lightning" if (tree / "conf" / "lightning").is_dir() else "trainer"
    return [f"{group}.num_threads={threads}", f"{group}.progress_bar=false"]


def run_train(
    tree: Path,
    overrides: str,
    scratch: Path,
    python: str,
    then: str | None = None,
    resume_from: str = "last.ckpt",
) -> dict[str, list]:
    """Train once with ``tree`` on PYTHONPATH (and, with ``then``, resume from the run's checkpoint ``resume_from``
    with those overrides added); return {metric: [[step, value], ...]} (timing metrics dropped) plus the final
    checkpoint's tensor digests."""
    work = Path(tempfile.mkdtemp(dir=scratch, prefix="run-"))
    db = work / "mlflow.db"
    cmd = [
        python,
        "-m",
        "gigpo_lab.cli",
        "train",
        *shlex.split(overrides),
        *quiet_overrides(tree),
        f"tracking.uri=sqlite:///{db}",
        f"hydra.run.dir={work / 'hydra'}",
        f"output_dir={work / 'out'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    stages = (
        [cmd]
        if then is None
        else [cmd, [*cmd, *shlex.split(then), f"ckpt_path={work / 'out/checkpoints/resume_from.ckpt'}"]]
    )
    for i, stage in enumerate(stages):
        if i:  # the resumed process must write every later checkpoint, last.ckpt included, itself
            folder = work / "out/checkpoints"
            if not (folder / resume_from).is_file():
                sys.exit(f"--from {resume_from}: the first run wrote no such checkpoint in {folder}")
            (folder / resume_from).rename(folder / "resume_from.ckpt")
            for ckpt in folder.glob("*.ckpt"):
                if ckpt.name != "resume_from.ckpt":
                    ckpt.unlink()
        proc = subprocess.run(stage, env=env, cwd=work, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"training failed with {tree}:\n{proc.stderr[-4000:]}")
    return {**read_history(db), **checkpoint_digests(work / "out/checkpoints/last.ckpt")}


def checkpoint_digests(path: Path) -> dict[str, list]:
    """{``ckpt/<state>/<name>``: [[dtype, shape, sha1 of the bytes]]} for every tensor of the checkpoint's model
    and optimizer state, and its ``epoch`` and ``global_step`` counters."""
    import torch

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    out: dict[str, list] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, torch.Tensor):
            raw = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            out[prefix] = [[str(value.dtype), list(value.shape), hashlib.sha1(raw).hexdigest()]]
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{prefix}/{i}", item)

    for count in ("epoch", "global_step"):
        out[f"ckpt/{count}"] = [[ckpt.get(count)]]
    for part in ("state_dict", "optimizer_states"):
        walk(f"ckpt/{part}", ckpt.get(part, {}))
    return out


def read_history(db: Path) -> dict[str, list[list[float]]]:
    """Every metric of the store's only run: {key: [[step, value], ...]} sorted by step (timing metrics dropped)."""
    import sqlite3

    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT key, step, value, is_nan FROM metrics ORDER BY key, step, timestamp"
    ).fetchall()
    con.close()
    out: dict[str, list[list[float]]] = {}
    for key, step, value, is_nan in rows:
        if not key.startswith(IGNORED_PREFIXES):
            out.setdefault(key, []).append([step, "nan" if is_nan else value])
    return out


def diff_histories(old: dict, new: dict) -> list[str]:
    """Human-readable differences (missing keys, different lengths or values); empty when identical."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            lines.append(f"{key}: only in {'new' if a is None else 'base'}")
        elif a != b:
            bad = [(x, y) for x, y in zip(a, b, strict=False) if x != y][:3]
            lines.append(f"{key}: {len(a)} vs {len(b)} points; first differences (base, new): {bad}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", type=Path, required=True, help="the reference source tree (e.g. /work/base)"
    )
    parser.add_argument("--new", type=Path, default=Path.cwd(), help="the tree under test (default: cwd)")
    parser.add_argument("--config", action="append", help="Hydra overrides, one run per flag (default: two)")
    parser.add_argument(
        "--then",
        help="resume each config from its checkpoint --from with these overrides added (a resumed run)",
    )
    parser.add_argument(
        "--from", dest="resume_from", default="last.ckpt", help="the checkpoint --then resumes"
    )
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "gigpo-bitexact")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    failed = 0
    for overrides in args.config or DEFAULT_CONFIGS:
        base_id = tree_commit(args.base)
        key = hashlib.sha1(
            f"{args.base.resolve()}|{base_id}|{overrides}|{args.then}|{args.resume_from}|ckpt2".encode()
        ).hexdigest()[:16]
        cache = args.scratch / f"base-{key}.json"
        if cache.exists() and not base_id.endswith("-dirty"):
            old = json.loads(cache.read_text())
        else:
            old = run_train(args.base, overrides, args.scratch, args.python, args.then, args.resume_from)
            cache.write_text(json.dumps(old))
        new = run_train(args.new, overrides, args.scratch, args.python, args.then, args.resume_from)
        lines = diff_histories(old, new)
        points = sum(len(v) for k, v in old.items() if not k.startswith("ckpt/"))
        tensors = sum(k.startswith("ckpt/") for k in old)
        verdict = "IDENTICAL" if not lines else "DIFFERENT"
        label = (
            overrides
            if args.then is None
            else f"{overrides}, then resumed from {args.resume_from} with {args.then!r}"
        )
        print(
            f"[{verdict}] {label!r}: {len(old) - tensors} metrics, {points} points, {tensors} checkpoint tensors (base {base_id[:10]})"
        )
        for line in lines[:20]:
            print("   ", line)
        failed += bool(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
