"""``gigpo-lab``: one console script, one sub-command per job.

Each sub-command is imported only when it is used, so ``gigpo-lab ui`` does not pay for Lightning and
``gigpo-lab train --help`` does not pay for MLflow. The table below is the registry of sub-commands.
"""

from __future__ import annotations

import importlib
import sys

#: sub-command -> (module:function, one-line help). The function takes the remaining argv.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("gigpo_lab.cli.train:main", "train an agent (Hydra overrides; -m for a multirun sweep)"),
    "compare": (
        "gigpo_lab.analysis.compare:main",
        "a sweep's configurations over seeds (IQM, 95% CIs) and plots",
    ),
    "ui": ("gigpo_lab.cli.ui:main", "the MLflow UI on 127.0.0.1, on the lab's store"),
    "import-metrics": (
        "gigpo_lab.tracking.import_metrics:main",
        "send what a run kept in mlflow_unsent_*.jsonl while its MLflow store was unreachable",
    ),
    "export": (
        "gigpo_lab.policy.export:main",
        "a checkpoint's HF policy as a Hugging Face model folder: gigpo-lab export CKPT OUT",
    ),
    "study": (
        "gigpo_lab.study.cli:main",
        "a pre-registered study: plan, register, run, status, analyse SPEC",
    ),
    "docs": ("gigpo_lab.configdoc:main", "write docs/CONFIG.md from the configs (--check: exit 1 if stale)"),
}

USAGE = "usage: gigpo-lab <command> [args…]\n\ncommands:\n" + "\n".join(
    f"  {name:<9} {help_}" for name, (_, help_) in COMMANDS.items()
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE + "\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"gigpo-lab: unknown command {name!r}; valid commands: {', '.join(COMMANDS)}\n")
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    result = getattr(importlib.import_module(module_name), func_name)(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
