"""Typed schemas of the ``trainer`` and ``lightning`` config groups (``loss``'s is beside its class, in
``gigpo_lab/algorithm/loss.py``).

Each is its option (``trainer=default``, ``lightning=cpu``; ``config_paths.register_schemas``),
with no YAML file; ``conf/lightning/gpu.yaml`` and ``ddp.yaml`` extend ``cpu`` and set only what differs. A misspelt key or a value of the wrong type or outside a choice fails when
the config is composed.

``trainer`` holds the algorithm's loop (iterations, PPO epochs, minibatches, optimizer, gradient clipping,
schedules): it decides the numbers a run produces. ``lightning`` holds where and how that loop runs
(accelerator, devices, strategy, precision, torch threads, the progress line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from gigpo_lab.algorithm.settings import param
from gigpo_lab.choices import choice_enum, default_of
from gigpo_lab.training.runtime import LightningRuntime

#: Lightning's accelerator names (lightning.pytorch.Trainer(accelerator=...)).
Accelerator = choice_enum("Accelerator", ("cpu", "gpu", "cuda", "mps", "tpu", "auto"), __name__)
#: Lightning's precision names (lightning.fabric.connector._PRECISION_INPUT_STR, the non-legacy ones).
Precision = choice_enum(
    "Precision",
    ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true", "transformer-engine"),
    __name__,
)


def _adamw() -> dict[str, Any]:
    return {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 0.0003, "weight_decay": 0.0}


@dataclass
class TrainerConfig:
    """The algorithm's iteration loop; one Lightning epoch (one ``training_step``) is one iteration. ``instantiate(cfg.trainer)``
    returns this dataclass itself, its optimizer built (a partial), for ``GiGPOModule`` and the Trainer."""

    _target_: str = "gigpo_lab.training.schema.TrainerConfig"

    #: Training iterations (each: one rollout + ppo_epochs passes); Lightning's max_epochs.
    iterations: int = param(40, low=1)
    #: Stop after the iteration that reaches this many training env steps; null = no limit.
    max_env_steps: Optional[int] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: K: passes over each iteration's rows, each a fresh shuffle.
    ppo_epochs: int = param(2, low=1)
    #: Rows per optimizer step; <= 0 = all rows of the iteration in one step.
    minibatch_size: int = 128
    #: Rows per forward in old/ref scoring and per forward+backward in a step (each distinct row once; in a step
    #: only with distinct_rows), shortest rows together, padding trimmed, gradients accumulated to the same
    #: step (a memory bound for LLMs); 0 = whole minibatches.
    micro_batch_size: int = 0
    #: Run every prompt run that rows share once, in the scoring and the update: the distinct rows (cut into
    #: micro-batches when micro_batch_size > 0) are sorted by prompt and packed as a radix tree into one sequence
    #: per chunk, and the minibatch's common opening runs once (gigpo_lab/packing/shared_prefix.py). The same
    #: log-probs and gradients up to float rounding, for less compute when prompts share long runs (an LLM's
    #: system prompt and history, the tiny policy's state before its action history). null = the policy's
    #: choice: on for the tiny policy (one dense attention per chunk; about half the update's time,
    #: experiments/bench/bench_default_run.py), off for the Hugging Face ones; false = every row's whole prompt.
    shared_prefix: Optional[bool] = None  # noqa: UP045 (OmegaConf reads typing.Optional)
    #: With shared_prefix: a chunk also closes before its packed tree (shared prompt runs once, plus the
    #: responses) would exceed this many tokens, so that memory is bounded by tokens and rows that share more
    #: fit more to a chunk (micro_batch_size stays the row limit). null = the policy's choice: 1024 for the tiny
    #: policy (its dense attention grows with the square), none for the Hugging Face ones; 0 = rows only.
    shared_prefix_tokens: Optional[int] = param(None, low=0)  # noqa: UP045
    #: true = the PPO ratio's old log-probs are the torch engine's sampling log-probs (the same module at the
    #: same temperature; needs rollout.top_p=1), saving the scoring pass (and its rollout/entropy metric);
    #: false = rescore the rows after the rollout.
    reuse_rollout_logprobs: bool = False
    #: A partial constructor of any torch.optim class, built with the policy's parameters. lr 3e-4 keeps the
    #: tiny policy's Adam steps from undoing it (docs/WHY_RUNS_FAIL.md); the GiGPO paper's LLM runs use 1e-6.
    optimizer: dict[str, Any] = field(default_factory=_adamw)
    #: The update's forward and backward once per distinct (prompt, response) row, indexed back: the same loss
    #: and gradient up to float rounding; false = every row.
    distinct_rows: bool = True
    #: Stop an iteration's remaining optimizer steps once a minibatch's approx_kl exceeds this (SB3's
    #: target_kl); null = never.
    target_kl: Optional[float] = None  # noqa: UP045
    #: Clip every step reward the estimators see to [-c, c] (DQN's reward clipping, Mnih et al. 2015), after
    #: the rollout and before any exploration bonus; rollout/return, success and the logged returns stay the
    #: env's own. 1.0 puts every env on one scale, that of the count bonus and the invalid penalty: on
    #: CliffWalking a -100 fall otherwise drowns the rarer success signal (docs/WHY_RUNS_FAIL.md); rewards in
    #: [-1, 1] (FrozenLake) are unchanged, bit for bit. null = the env's rewards as they are.
    reward_clip: Optional[float] = param(1.0, low=0.0, low_open=True)  # noqa: UP045
    #: Clip the global gradient norm to this before each optimizer step; null = no clipping. Part of the update
    #: rule (PPO's max_grad_norm), so it lives here and not under lightning.
    gradient_clip_val: Optional[float] = 1.0  # noqa: UP045
    #: Save a checkpoint every N iterations (and always at the end); last.ckpt is the newest.
    checkpoint_every: int = param(5, low=1)
    #: true = keep every periodic checkpoint (iterNNNN.ckpt) beside last.ckpt; false = last.ckpt alone, still
    #: rewritten every checkpoint_every iterations (a light run: ``gigpo-lab study run``'s default). Not part of
    #: a sweep job's identity (resume).
    keep_checkpoints: bool = True
    #: true = a checkpoint holds every weight; false = it leaves out the weights that do not train (an LLM's
    #: base under LoRA, a frozen reference copy) and records their fingerprint: SmolLM2-135M's checkpoint drops
    #: from about 600 MB to the adapters and the optimizer state. A resume and ``gigpo-lab export`` rebuild
    #: them from the model's folder and refuse another base (``gigpo_lab/policy/frozen_base.py``). Not
    #: with lightning=fsdp. ``gigpo-lab study run``'s light runs set it false. Not part of a sweep job's identity.
    checkpoint_frozen_base: bool = True
    #: Evaluate on held-out seeds every N iterations (and after the last); 0 = never.
    eval_every: int = param(5, low=0)
    #: true = the evaluations start at iteration 0, before the first update; false = at iteration eval_every
    #: (with the one after the last iteration as always), so the untrained policy is not evaluated. Where every
    #: arm of a comparison starts from the same policy and seed, that evaluation is the same in each, and in an
    #: LLM run it can cost more than a trained one (its episodes run to env.max_turns). Changes nothing else:
    #: the training draws the same episodes either way; eval/auc then starts at the first evaluation.
    eval_at_start: bool = True
    #: How many of the last evaluations eval/final averages: 3 smooths a long run's end; 1 = the last
    #: evaluation alone, for a budget of a few evaluations, where the last three would reach back to the
    #: untrained policy's.
    final_window: int = param(3, low=1)
    #: Write a JSONL sample of trajectories to MLflow every N iterations; 0 = never.
    sample_every: int = param(10, low=0)


@dataclass
class LightningConfig:
    """Where and how the loop runs: Lightning's Trainer arguments and the torch runtime
    (``instantiate(cfg.lightning)`` builds a ``LightningRuntime``)."""

    _target_: str = "gigpo_lab.training.runtime.LightningRuntime"

    #: torch CPU threads; null = torch's default (all cores); sweeps set 1 per parallel job.
    num_threads: Optional[int] = default_of(LightningRuntime, "num_threads")  # noqa: UP045
    #: Lightning accelerator.
    accelerator: Accelerator = Accelerator[default_of(LightningRuntime, "accelerator")]
    #: Lightning devices: a count (-1 = every visible GPU), or a list of device indices.
    devices: Any = default_of(LightningRuntime, "devices")
    #: Lightning num_nodes: nodes of one job (SLURM: hydra.launcher.nodes), each running `devices` processes.
    num_nodes: int = default_of(LightningRuntime, "num_nodes")  # type: ignore[assignment]
    #: Lightning strategy: auto, ddp (lightning=ddp) or the lab's FSDP2 (lightning=fsdp, a _target_ node);
    #: spawning strategies, Lightning's FSDP1 and other model-parallel strategies are refused at start.
    strategy: Any = default_of(LightningRuntime, "strategy")
    #: Lightning precision; bf16-mixed keeps float32 master weights (lr-1e-6 updates survive).
    precision: Precision = Precision[default_of(LightningRuntime, "precision")]
    #: Lightning's deterministic= (torch.use_deterministic_algorithms): CPU runs repeat bit for bit either way;
    #: true makes CUDA ops deterministic or raise.
    deterministic: bool = default_of(LightningRuntime, "deterministic")
    #: Show the Rich progress bar (iteration, success rate, tokens/s).
    progress_bar: bool = default_of(LightningRuntime, "progress_bar")


#: ``"<group>/<option>"`` -> schema (stored as ``schema/<group>/<option>``).
SCHEMAS: dict[str, type] = {
    "trainer/default": TrainerConfig,
    "lightning/cpu": LightningConfig,
}
