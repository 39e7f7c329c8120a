"""Peak resident memory per rank under ``lightning=fsdp`` against ``lightning=ddp``: the same model and job on 2
CPU ranks (gloo).

    python experiments/bench/bench_fsdp_memory.py                          # Qwen2-shaped, hidden 1024, 8 layers
    python experiments/bench/bench_fsdp_memory.py --hidden 512 --layers 4 --iterations 1

The model is a random Qwen2-shaped one built from a config (``tests/hf_tiny.py``; nothing is downloaded), fully
fine-tuned with Adam and a KL term, so each rank holds a policy, its gradients, Adam's two moments and a frozen
reference copy; each rank collects one group of 2 episodes of 2 turns, so that the activations stay small beside
those. Each rank is a process of its own, started here with the variables a launcher sets
(``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), so ``os.wait4`` gives each one's peak resident set
(``ru_maxrss``). The peak includes what every rank loads before sharding (the model from disk and its reference
copy) and, under FSDP, the weights gathered for the rollout. Printed: MB per rank and fsdp / ddp.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from hf_tiny import build_tiny_hf_model  # noqa: E402
from ranks import start_ranks  # noqa: E402


def run_job(strategy: str, model: Path, folder: Path, iterations: int) -> list[float]:
    """Train ``iterations`` under ``lightning=<strategy>`` on 2 CPU ranks; each rank's peak RSS in MB."""
    overrides = [
        f"lightning={strategy}",
        "lightning.accelerator=cpu",
        "lightning.devices=2",
        "lightning.precision=32-true",
        "lightning.num_threads=1",
        "lightning.progress_bar=false",
        "model=hf",
        f"model.path={model}",
        f"trainer.iterations={iterations}",
        "trainer.eval_every=0",
        "loss.kl_coef=0.1",  # a reference copy, as a full fine-tuning run with KL keeps
        # few, short rows: the activations stay small beside the weights and their optimizer state
        "rollout.groups=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "env.max_turns=2",
        f"output_dir={folder / 'out'}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
    ]
    logs = [(folder / f"rank{rank}.log").open("w") for rank in range(2)]
    procs = start_ranks(
        overrides, folder, 2, lambda rank: {"stdout": logs[rank], "stderr": subprocess.STDOUT}
    )
    peaks = []
    for rank, proc in enumerate(procs):
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            tail = (folder / f"rank{rank}.log").read_text()[-3000:]
            raise SystemExit(f"{strategy} rank {rank} failed ({proc.returncode}):\n{tail}")
        peaks.append(usage.ru_maxrss / 1024)  # KiB on Linux
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fsdp_memory_") as tmp:
        tmp = Path(tmp)
        heads = max(1, args.hidden // 64)
        model = build_tiny_hf_model(
            tmp / "model",
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=heads,
            num_kv_heads=heads,
        )
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model)
        with __import__("torch").device("meta"):
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        print(
            f"model: Qwen2-shaped, hidden {args.hidden}, {args.layers} layers, {n_params / 1e6:.1f} M parameters"
        )
        print(
            f"  fp32 weights {n_params * 4 / 2**20:.0f} MB; weights + grads + Adam + reference = 5x that unsharded"
        )
        peaks = {}
        for strategy in ("ddp", "fsdp"):
            folder = tmp / strategy
            folder.mkdir()
            peaks[strategy] = run_job(strategy, model, folder, args.iterations)
            print(f"{strategy:5s} peak RSS per rank (MB): " + ", ".join(f"{p:.0f}" for p in peaks[strategy]))
        for rank in range(2):
            ratio = peaks["fsdp"][rank] / peaks["ddp"][rank]
            saved = peaks["ddp"][rank] - peaks["fsdp"][rank]
            print(f"rank {rank}: fsdp / ddp = {ratio:.2f} ({saved:.0f} MB less)")


if __name__ == "__main__":
    main()
