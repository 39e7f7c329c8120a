"""``GiGPOModule``: the Lightning module that holds the policy, the frozen reference and the loss, and runs the
training loop itself.

One ``training_step`` is one RL iteration, under manual optimisation (``automatic_optimization = False``), in the
order it runs (ARCHITECTURE.md, "One iteration, through the code"):

1. ``prepare_iteration``: evaluate when due, collect B groups x G envs, score the old and reference log-probs,
   shape the rewards, compute the advantages, and cut K epochs of shuffled minibatches;
2. ``update``: each minibatch's loss, ``manual_backward`` and ``optimizer.step()`` (inside it,
   ``on_before_optimizer_step`` guards and clips the gradients); ``trainer.target_kl`` is a ``break``;
3. ``end_iteration``: sync the rollout engine's weights, queue the iteration's metrics (and the final evaluation
   after the last iteration) in ``pending_metrics``.

The data side is one iteration index per Lightning epoch (``training/data.py``), so an epoch is an iteration and
its end hooks observe a finished one: the ``IterationLogger`` writes ``pending_metrics``, the progress line
prints, then ``ModelCheckpoint`` saves, so a checkpoint always follows the metrics of its iteration.
"""

from __future__ import annotations

import time
from collections import defaultdict

import lightning as L
import torch

from gigpo_lab.algorithm.diagnostics import CollapseCounter, group_signal
from gigpo_lab.algorithm.exploration import NoBonus
from gigpo_lab.algorithm.group_filter import NoFilter
from gigpo_lab.algorithm.loss import LossOutput, PolicyLoss
from gigpo_lab.algorithm.shaping import clip_rewards, penalize_kl
from gigpo_lab.batch import StepBatch
from gigpo_lab.policy.frozen_base import RECORD_KEY as FROZEN_RECORD
from gigpo_lab.policy.frozen_base import leave_out, put_back
from gigpo_lab.policy.frozen_base import record as frozen_record
from gigpo_lab.rollout.schema import RolloutConfig  # the evaluation defaults, written once there
from gigpo_lab.training.critic import score_values
from gigpo_lab.training.data import Iterations, shuffled_minibatches
from gigpo_lab.training.distributed import across_ranks, check_world_size
from gigpo_lab.training.evaluation import EvalCurve, run_evaluation
from gigpo_lab.training.fsdp import ShardedStrategy, full_value, gathered, shard
from gigpo_lab.training.grad_guard import GradientWatch, first_culprit_across_ranks
from gigpo_lab.training.group_filtering import collect_filtered
from gigpo_lab.training.passes import PolicyPasses
from gigpo_lab.training.samples import sample_rows
from gigpo_lab.training.schema import TrainerConfig
from gigpo_lab.training.seeds import extra_group_seeds, group_seeds, iteration_seed


class GiGPOModule(L.LightningModule):
    """Policy + reference + estimator + loss, trained by a ``lightning.Trainer``.

    Args:
        policy: a ``gigpo_lab.policy.Policy`` (an nn.Module with ``logprobs`` and ``tokenizer``).
        estimator: a registered advantage estimator (``__call__(StepBatch) -> AdvantageOutput``).
        loss: the configured ``PolicyLoss``.
        collector: the rollout collector (``collect`` and ``evaluate``); its ``groups`` is B, the episode
            groups per iteration.
        engine: the rollout engine (``sync_weights`` after each update).
        loop: the loop settings, a ``TrainerConfig`` (``gigpo_lab/training/schema.py``, where every field is
            documented) as ``instantiate(cfg.trainer)`` builds it: ``optimizer`` is a partial constructor,
            called with the policy's parameters. ``target_kl`` is for single-process runs only;
            ``reuse_rollout_logprobs`` needs an engine whose ``samples_policy_logprobs`` is true (it samples
            from this very module's distribution).
        seed: the run's seed (training seeds of env groups and sampling derive from it).
        eval_episodes / eval_greedy / eval_temperature / eval_greedy_episodes: the evaluation
            (``gigpo_lab/training/evaluation.py``): held-out episodes, greedy or sampled at eval_temperature,
            and the greedy episodes logged beside a sampled one.
        logprob_temperature: the rollout's sampling temperature; old, reference and current log-probs are all
            taken at it, so the PPO ratio compares the distributions the tokens were sampled from (verl's choice).
        exploration: an exploration bonus (``gigpo_lab.algorithm.exploration``: called on each collected batch, it may add
            to ``batch.rewards`` before the estimator, or return an advantage stream that is added to the
            estimator's; its ``state()`` is checkpointed); None = ``NoBonus``.
        group_filter: which collected groups to train on (``gigpo_lab.algorithm.group_filter``, run by
            ``gigpo_lab.training.group_filtering``); None = ``NoFilter``, every group, the plain collection.

    Outside a Trainer (scripts that drive the parts by hand, as ``experiments/bench/bench_llm_iteration.py``)
    the public ``score``, ``minibatch_loss`` and ``evaluate`` work alone; the Lightning hooks need the Trainer.
    """

    automatic_optimization = False  # training_step runs the iteration's own epochs and optimizer steps

    def __init__(
        self,
        policy: torch.nn.Module,
        estimator,
        loss: PolicyLoss,
        collector,
        engine,
        loop: TrainerConfig,
        *,
        seed: int = 0,
        eval_episodes: int = RolloutConfig.eval_episodes,
        eval_greedy: bool = RolloutConfig.eval_greedy,
        eval_temperature: float = RolloutConfig.eval_temperature,
        eval_greedy_episodes: int = RolloutConfig.eval_greedy_episodes,
        logprob_temperature: float = 1.0,
        exploration=None,
        group_filter=None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.reference = None
        if loss.needs_reference:
            self.reference = (
                policy.make_reference()
            )  # a frozen copy; with LoRA the adapter-free base, no copy
        self.estimator, self.loss_fn = estimator, loss
        #: The critic (ARCHITECTURE.md, "Where the critic sits"): only an estimator that needs the ``values``
        #: column (ppo) gives the policy a value head, after the reference was made (which never has one).
        self.critic = "values" in getattr(estimator, "requires", ())
        if self.critic:
            if not getattr(policy, "can_serve_value_head", False):
                raise ValueError(
                    f"estimator {estimator.name!r} needs a value head, and {type(policy).__name__} exposes no "
                    "hidden state for one; use model=tiny or a Hugging Face model (model=hf), or another estimator"
                )
            policy.add_value_head()
        self.collector, self.engine = collector, engine
        self.groups = collector.groups if collector is not None else 0  # B per iteration (per rank)
        self.loop = loop
        self.seed = seed
        self.eval_episodes, self.eval_greedy = eval_episodes, eval_greedy
        self.eval_temperature, self.eval_greedy_episodes = eval_temperature, eval_greedy_episodes
        self.eval_curve = EvalCurve(loop.final_window)
        self.exploration = exploration if exploration is not None else NoBonus()
        self.group_filter = group_filter if group_filter is not None else NoFilter()
        if loop.reuse_rollout_logprobs and not getattr(engine, "samples_policy_logprobs", False):
            raise ValueError(
                "trainer.reuse_rollout_logprobs=true needs an engine whose sampling log-probs are the policy's "
                f"own (the torch engine with rollout.top_p=1); {type(engine).__name__} is not: set it to false"
            )
        self.env_steps_total = 0
        self.collapses = CollapseCounter()
        self.mlflow_run_id: str | None = None
        #: (step, metrics) pairs waiting for the tracking callback; ``samples`` JSONL text by iteration.
        self.pending_metrics: list[tuple[int, dict[str, float]]] = []
        self.pending_samples: list[tuple[int, list[dict]]] = []
        self._grad_watch: GradientWatch | None = None  # on the first update (_gradient_watch)
        self._train_stats: defaultdict[str, list[float]] = defaultdict(list)
        self._iter_metrics: dict[str, float] = {}
        self._update_start = 0.0
        #: By state-dict prefix, what a checkpoint keeps of the frozen weights it leaves out (none unless
        #: trainer.checkpoint_frozen_base=false), taken now, before a precision plugin may cast the module.
        self._frozen_records = {} if loop.checkpoint_frozen_base else {
            prefix: frozen_record(module) for prefix, module in self._frozen_holders().items()
        }  # fmt: skip
        # trainer.shared_prefix(_tokens): null is the policy's choice (several processes turn it off: on_fit_start)
        packed = getattr(policy, "packed_update", False), getattr(policy, "packed_tokens", 0)  # any nn.Module
        self.passes = PolicyPasses(
            policy,
            self.reference,
            loss,
            loop,
            logprob_temperature,
            packed[0] if loop.shared_prefix is None else loop.shared_prefix,
            packed[1] if loop.shared_prefix_tokens is None else loop.shared_prefix_tokens,
            self.critic,
            self._train_stats,
        )

    # ----------------------------------------------------------------- Lightning plumbing
    def on_fit_start(self) -> None:
        passes = self.passes
        passes.shared_prefix = check_world_size(self.loop, self.trainer.world_size, passes.shared_prefix)

    def configure_optimizers(self):
        return self.loop.optimizer(self.policy.parameters())

    def train_dataloader(self) -> Iterations:
        return Iterations(lambda: self.current_epoch)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["gigpo_lab"] = {
            "env_steps_total": self.env_steps_total,
            "mlflow_run_id": self.mlflow_run_id,
            "collapses": self.collapses.state(),
            "exploration": self.exploration.state(),
            "eval_curve": self.eval_curve.state(),
        }
        if self._frozen_records:  # trainer.checkpoint_frozen_base=false
            checkpoint["gigpo_lab"][FROZEN_RECORD] = {
                prefix: leave_out(checkpoint["state_dict"], prefix, kept)
                for prefix, kept in self._frozen_records.items()
            }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("gigpo_lab", {})
        trainer = getattr(self, "_trainer", None)
        self.restore_frozen(checkpoint, getattr(trainer, "ckpt_path", None) or "ckpt_path's checkpoint")
        self.env_steps_total = int(state.get("env_steps_total", 0))
        self.collapses.load(state.get("collapses", {}))
        self.exploration.load(state.get("exploration", {}))
        self.eval_curve.load(state.get("eval_curve", {}))

    def restore_frozen(self, checkpoint: dict, source: str) -> None:
        """Put back into ``checkpoint["state_dict"]`` (in place) the frozen weights a checkpoint saved with
        ``trainer.checkpoint_frozen_base=false`` left out, after checking them (``policy/frozen_base.py``); a
        whole checkpoint is left as it is. Lightning calls it through ``on_load_checkpoint``; a script that loads
        a checkpoint by hand calls it before ``load_state_dict``. ``source`` names the checkpoint in errors."""
        holders = self._frozen_holders()
        for prefix, kept in checkpoint.get("gigpo_lab", {}).get(FROZEN_RECORD, {}).items():
            if prefix not in holders:  # a reference module at save time, none now
                raise ValueError(
                    f"{source} was saved with a frozen {prefix.rstrip('.')} copy (a KL reference) that this run "
                    "does not build; resume it with its own loss.kl_coef (> 0) and model"
                )
            current = self._frozen_records.get(prefix)
            put_back(checkpoint["state_dict"], holders[prefix], prefix, kept, str(source), current)

    def _frozen_holders(self) -> dict[str, torch.nn.Module]:
        """The modules whose frozen weights a checkpoint may leave out, by state-dict prefix: the policy (an LLM's
        base under LoRA) and a reference that is a module of its own (a frozen copy of the starting policy)."""
        holders = {"policy.": self.policy}
        if isinstance(self.reference, torch.nn.Module):
            holders["reference."] = self.reference
        return holders

    # ----------------------------------------------------------------- one iteration
    def configure_model(self) -> None:
        """Under ``lightning=fsdp``: shard the policy and its reference copy over the ranks (``fsdp.shard``);
        under any other strategy nothing."""
        strategy = self.trainer.strategy
        if isinstance(strategy, ShardedStrategy):
            shard(self, strategy.data_parallel_mesh)

    def training_step(self, iteration: int, batch_idx: int) -> None:
        """Iteration ``iteration`` (the current epoch), whole: the three steps of the module docstring.

        Lightning runs ``training_step`` under the precision plugin's autocast; here it is off (``_own_precision``)
        except around each minibatch's forward (``update``), so the rollout, scoring, estimator and evaluation run
        at the weights' own precision, as they would outside a training step."""
        with _own_precision(self.device):
            minibatches = self.prepare_iteration()
            self.update(minibatches)
            self.end_iteration()

    @torch.no_grad()
    def prepare_iteration(self) -> list[StepBatch]:
        """Rollout, scoring and advantages of iteration ``current_epoch``; returns its minibatches. Under
        ``lightning=fsdp`` all of it runs on the gathered weights (``fsdp.gathered``)."""
        with gathered(self):
            return self._prepare_iteration()

    def _prepare_iteration(self) -> list[StepBatch]:
        it = self.current_epoch
        # each rank of a multi-process run collects its own B groups with its own sampling stream: iteration
        # it, rank r is shard it * world + r (a single process: shard it, as before)
        shard = it * self.trainer.world_size + self.global_rank
        gen = torch.Generator().manual_seed(iteration_seed(self.seed, shard))
        metrics: dict[str, float] = {}
        self.policy.eval()
        if (
            self.loop.eval_every > 0
            and it % self.loop.eval_every == 0
            and (it > 0 or self.loop.eval_at_start)
        ):
            self.pending_metrics.append((it, self.evaluate()))

        t0 = time.perf_counter()
        batch, rollout = self._collect(group_seeds(self.seed, shard, self.groups), shard, gen)
        rollout.update(self.score(batch))
        if self.critic:  # V(s_t) before the updates, beside the old log-probs
            batch.values = score_values(self.policy, batch, self.loop.micro_batch_size, self.device)
        rollout.update(group_signal(batch.extras["returns"], batch.extras["traj_group"]))
        # the rewards the estimator sees (gigpo_lab/algorithm/shaping.py); the metrics above are the env's
        batch.rewards = clip_rewards(batch.rewards, self.loop.reward_clip)
        bonus = self.exploration(batch)
        rollout.update(bonus.metrics)
        t1 = time.perf_counter()
        if self.reference is not None and self.loss_fn.kl_in_reward:
            penalty = self.loss_fn.reward_penalty(batch.old_logprobs, batch.ref_logprobs, batch.response_mask)
            batch.rewards = penalize_kl(batch.rewards, penalty)
        adv = self.estimator(batch)
        # exploration with its own advantage stream adds it here; otherwise the estimator's, unchanged
        batch.advantages = bonus.add_to(adv.advantages).to(torch.float32)
        metrics.update(bonus.dose(adv.advantages))  # adv/stream_ratio: the dose of the stream
        if self.critic:
            batch.value_targets = adv.returns.to(torch.float32)
        t2 = time.perf_counter()

        # several ranks: the job's counts and rates (a collective, every rank is here); one rank: unchanged
        rollout = across_ranks({"rollout/env_steps": float(len(batch)), **rollout}, self.trainer.strategy)
        env_steps = rollout["rollout/env_steps"]
        rollout_s = max(t1 - t0, 1e-9)
        self.env_steps_total += int(env_steps)
        metrics.update(rollout)
        metrics.update(adv.metrics)
        metrics.update(
            self.collapses.update(rollout["rollout/success_rate"], rollout["rollout/invalid_rate"])
        )
        metrics["rollout/env_steps_total"] = float(self.env_steps_total)
        metrics["time/rollout_s"] = t1 - t0
        metrics["time/advantage_s"] = t2 - t1
        metrics["perf/env_steps_per_s"] = env_steps / rollout_s
        metrics["perf/tokens_per_s"] = rollout.get("rollout/tokens", 0.0) / rollout_s
        self._iter_metrics = metrics
        if self.loop.sample_every > 0 and it % self.loop.sample_every == 0:
            self.pending_samples.append((it, sample_rows(batch, self.policy.tokenizer)))
        self.policy.train()
        self._update_start = time.perf_counter()
        return shuffled_minibatches(batch, self.loop.ppo_epochs, self.loop.minibatch_size, gen)

    def _collect(
        self, seeds: list[int], shard: int, gen: torch.Generator
    ) -> tuple[StepBatch, dict[str, float]]:
        """The iteration's batch: the collection of ``seeds``, or, under a group filter, the groups it keeps of
        this and any extra collections (``extra_group_seeds``; ``gigpo_lab/training/group_filtering.py``)."""
        rule = self.group_filter
        if isinstance(rule, NoFilter):
            return self.collector.collect(seeds, gen)

        def seeds_of(c: int) -> list[int]:
            return (
                seeds if c == 0 else extra_group_seeds(self.seed, shard, self.groups, c, rule.max_collections)
            )

        return collect_filtered(self.collector, seeds_of, rule, gen, self.policy.tokenizer.pad_id)

    def score(self, batch: StepBatch) -> dict[str, float]:
        """``PolicyPasses.score``: fill the batch's ``old_logprobs`` and ``ref_logprobs``; their metrics."""
        return self.passes.score(batch, self.device)

    def update(self, minibatches: list[StepBatch]) -> None:
        """One optimizer step per minibatch, in order; once a minibatch's ``approx_kl`` exceeds
        ``trainer.target_kl``, that step and the rest of the iteration's are not taken."""
        optimizer = self.optimizers()
        watch = self._gradient_watch()
        steps = 0
        for i, mb in enumerate(minibatches):
            optimizer.zero_grad()  # micro-batches accumulate from zero, and a step not taken keeps none
            watch.reset()
            with self.trainer.precision_plugin.train_step_context():  # autocast around the forward alone
                loss, out = self.minibatch_loss(self._on_device(mb), watch.counted(self.manual_backward))
            torch.clear_autocast_cache()  # the step below changes the weights its casts were cached from
            if not torch.isfinite(out.loss):
                raise FloatingPointError(
                    f"the loss is {out.loss.item()} at iteration {self.current_epoch}, minibatch {i} "
                    f"(rows of trajectories {sorted(set(mb.traj_ids.tolist()))[:8]}); the checkpoint before it "
                    "is kept; lower the learning rate or check the rewards"
                )
            for key in ("loss", "pg_loss", "kl", "entropy", "clipfrac", "approx_kl"):
                self._train_stats[f"train/{key}"].append(float(getattr(out, key).detach()))
            if self.loop.target_kl is not None and float(out.approx_kl) > self.loop.target_kl:
                optimizer.zero_grad()  # micro-batches already back-propagated: no step on them
                break
            watch.counted(self.manual_backward)(loss)
            optimizer.step()  # on_before_optimizer_step: the guard and the clipping
            steps += 1
        # the means count every planned minibatch, a step not taken as 0 (train/steps_taken: their share)
        planned = len(minibatches)
        self._train_stats["train/steps_taken"] += [1.0] * steps + [0.0] * (planned - steps)
        self._train_stats["train/lr"] += [float(optimizer.param_groups[0]["lr"])] * planned

    def _gradient_watch(self) -> GradientWatch:
        """The hooks that name the first non-finite gradient (``training/grad_guard.py``), put on the policy's
        parameters at the first update, after ``configure_model`` has sharded them under fsdp."""
        if self._grad_watch is None:
            self._grad_watch = GradientWatch(self.policy.named_parameters())
        return self._grad_watch

    def _on_device(self, mb: StepBatch) -> StepBatch:
        """``mb`` with its tensors on the module's device (the CPU: unchanged)."""
        if self.device.type == "cpu":
            return mb
        moved = {k: v.to(self.device) for k, v in vars(mb).items() if isinstance(v, torch.Tensor)}
        return StepBatch(**{**vars(mb), **moved})

    def minibatch_loss(self, mb: StepBatch, backward) -> tuple[torch.Tensor, LossOutput]:
        """``PolicyPasses.minibatch_loss``: the loss of minibatch ``mb`` (on the module's device) to
        back-propagate, every chunk but the last already back-propagated by ``backward`` (``manual_backward``
        in ``update``, ``torch.Tensor.backward`` for a script without a Trainer); and its ``LossOutput``."""
        return self.passes.minibatch_loss(mb, backward, self.device, self.current_epoch)

    def on_before_optimizer_step(self, optimizer) -> None:
        # Inside ``optimizer.step()``: the one point where a GradScaler (16-mixed) has unscaled the gradients and
        # the step has not yet written them, so the guard and the clipping see the true gradients here.
        grads = [p.grad for p in self.policy.parameters() if p.grad is not None]
        if grads:
            norm = full_value(torch.nn.utils.get_total_norm(grads))  # over every rank's shard under fsdp
            scaled = getattr(self.trainer.precision_plugin, "scaler", None) is not None  # skips such steps
            if not scaled and not torch.isfinite(norm):  # before the step writes it into the weights
                culprit = first_culprit_across_ranks(
                    self._gradient_watch().first_non_finite(self.policy.named_parameters()),
                    self.trainer.strategy,
                )
                raise FloatingPointError(
                    f"the gradient norm is {float(norm)} at iteration {self.current_epoch} with a finite loss: the "
                    f"first non-finite gradient of the backward pass is {culprit}; the checkpoint before this "
                    "iteration is kept (on a GPU in bf16-mixed, try lightning.precision=32-true to tell a precision "
                    "problem from a bug)"
                )
            self._train_stats["train/grad_norm"].append(float(norm))
        if self.loop.gradient_clip_val is not None:
            self.clip_gradients(optimizer, self.loop.gradient_clip_val, "norm")

    def end_iteration(self) -> None:
        """Sync the engine and queue this iteration's metrics (and the final eval after the last one); stop
        the run once the env-step budget is spent. Runs before any epoch-end hook (module docstring). Under
        fsdp the weights are gathered once for the sync and the final eval."""
        step = self.current_epoch
        last = self.trainer.max_epochs is not None and step + 1 >= self.trainer.max_epochs
        if self.loop.max_env_steps is not None and self.env_steps_total >= self.loop.max_env_steps:
            self.trainer.should_stop = True  # the env-step budget is spent: stop after this iteration
            last = True
        with gathered(self):
            self.engine.sync_weights(self.policy)
            metrics = dict(self._iter_metrics)
            metrics.update({k: sum(v) / len(v) for k, v in self._train_stats.items() if v})
            if self._train_stats["train/approx_kl"]:  # a destructive update shows in the largest step
                metrics["train/approx_kl_max"] = max(self._train_stats["train/approx_kl"])
            metrics["time/update_s"] = time.perf_counter() - self._update_start
            metrics["train/iteration"] = float(step)
            self._train_stats.clear()
            self.pending_metrics.append((step, metrics))
            if self.loop.eval_every > 0 and last:
                self.pending_metrics.append((step + 1, self.evaluate()))

    # ----------------------------------------------------------------- evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out episodes (``gigpo_lab/training/evaluation.py``), and the run's ``eval/final`` and
        ``eval/auc`` so far. Several ranks share the episodes (a collective: every rank evaluates together);
        outside a Trainer one process plays them all. ``time/eval_s`` is this rank's."""
        was_training = self.policy.training
        self.policy.eval()
        start = time.perf_counter()
        result = run_evaluation(
            self.collector,
            self.seed,
            self.eval_episodes,
            self.eval_greedy,
            self.eval_temperature,
            self.eval_greedy_episodes,
            self._strategy(),
        )
        result["eval/env_steps_total"] = float(self.env_steps_total)
        result["time/eval_s"] = time.perf_counter() - start
        result.update(self.eval_curve.add(self.env_steps_total, result["eval/success_rate"]))
        self.policy.train(was_training)
        return result

    def _strategy(self):
        """The Trainer's strategy; None outside a Trainer (a script that drives ``evaluate`` alone)."""
        try:
            return self.trainer.strategy
        except RuntimeError:  # "not attached to a Trainer"
            return None


def _own_precision(device: torch.device):
    """Autocast off on ``device`` inside the block (Lightning enters the precision plugin's autocast around
    ``training_step``; a block outside it runs the same)."""
    return torch.autocast(device.type, enabled=False)
