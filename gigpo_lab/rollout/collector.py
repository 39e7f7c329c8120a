"""The collector: B groups x G envs played through the engine, returned as one ``StepBatch`` of step rows.

Env layout (B=2, G=3): env i belongs to group i // G and is reset with ``seeds[i // G]``::

    env / traj_id   0  1  2 | 3  4  5
    group_id        0  0  0 | 1  1  1
    reset seed      s0 s0 s0| s1 s1 s1

Rows come out sorted by (traj_id, step_id). ``anchor_ids`` number the distinct anchor strings of the batch
in order of first appearance, so equal strings get equal ids (across groups too; estimators group within
``group_id``).

An env that raises in ``step`` loses its trajectory: its rows are dropped from the batch (its group goes on
with the others), ``rollout/env_errors`` counts it, the error is logged with its traceback and the env is
rebuilt for the next iteration. When more than ``max_env_error_rate`` of an iteration's trajectories fail,
collection stops with ``EnvFailure`` carrying the first env's traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import gymnasium as gym
import torch

from gigpo_lab.algorithm.diagnostics import revisits
from gigpo_lab.algorithm.settings import bound, check_real
from gigpo_lab.batch import StepBatch
from gigpo_lab.policy.base import Policy
from gigpo_lab.rollout.episodes import EnvError, Turn, run_episodes, stack_turns
from gigpo_lab.rollout.held_out import empty_table, episode_table, table_metrics
from gigpo_lab.rollout.schema import RolloutConfig  # the share of failed trajectories: its default and bound

#: Trajectories copied into ``extras["samples"]`` (the first of each of the first groups).
SAMPLE_TRAJECTORIES = 2

log = logging.getLogger(__name__)


class EnvFailure(RuntimeError):
    """Too many envs raised in one collection; chained to the first env's exception."""


def too_many_errors(failed: int, count: int, limit: float) -> bool:
    """The lab's rule for stopping on env errors: more than ``limit`` (``rollout.max_env_error_rate``) of the
    ``count`` trajectories failed, or every one of them did."""
    return count > 0 and (failed / count > limit or failed == count)


def intern_strings(texts: Sequence[str]) -> torch.Tensor:
    """(N,) int64 ids of ``texts``: equal strings get equal ids, numbered by first appearance."""
    ids: dict[str, int] = {}
    return torch.tensor([ids.setdefault(t, len(ids)) for t in texts], dtype=torch.long)


class Collector:
    """Collects B x G episodes per call.

    Args:
        env_fn: builds one env (e.g. ``make_env`` partially applied); called B x G times, plus once per
            evaluation episode (envs are kept and reused).
        policy: builds the prompts. engine: samples the responses (``generate``).
        groups: B. group_size: G.
        max_env_error_rate: the share of trajectories per call whose env may raise (they are dropped); above
            it the call raises ``EnvFailure``. 0 stops at the first env error. Default and bound: the
            rollout schema's field.
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        policy: Policy,
        engine,
        *,
        groups: int,
        group_size: int,
        max_env_error_rate: float = RolloutConfig.max_env_error_rate,
    ):
        if groups < 1 or group_size < 1:
            raise ValueError(f"groups={groups} and group_size={group_size} must both be >= 1")
        check_real(
            "Collector", "max_env_error_rate", max_env_error_rate, bound(RolloutConfig, "max_env_error_rate")
        )
        self.env_fn, self.policy, self.engine = env_fn, policy, engine
        self.groups, self.group_size = groups, group_size
        self.max_env_error_rate = max_env_error_rate
        self.envs = [env_fn() for _ in range(groups * group_size)]
        self.eval_envs: list[gym.Env] = []

    def collect(self, seeds: Sequence[int], generator: torch.Generator) -> tuple[StepBatch, dict[str, float]]:
        """Play one episode in each of the B x G envs; the G envs of group b are reset with ``seeds[b]``.

        Returns:
            the ``StepBatch`` of all N step rows (token columns, ``old_logprobs`` = the engine's sampling
            log-probs, scalar columns, ``anchor_texts``) with per-trajectory ``extras`` ("success", "returns",
            "lengths", "traj_group": (B*G,) tensors; "samples": JSON-able dicts) and ``next_anchor_texts``
            (N anchor strings after the step), and the rollout metrics.
        """
        if len(seeds) != self.groups:
            raise ValueError(f"collect got {len(seeds)} seeds for groups={self.groups}")
        n_traj = self.groups * self.group_size
        traj_group = torch.arange(n_traj) // self.group_size
        env_seeds = [int(seeds[b]) for b in traj_group.tolist()]
        turns, success, errors = run_episodes(self.envs, env_seeds, self.policy, self.engine, generator)
        failed = self._handle_errors(errors, self.envs, n_traj, "training")
        rows = stack_turns(turns, self.policy.tokenizer.pad_id)
        anchors = [a for t in turns for a in t.anchors]
        next_anchors = [a for t in turns for a in t.next_anchors]

        keep = ~failed[rows["env_index"]]  # the rows of trajectories whose env raised are dropped
        order = torch.argsort(rows["env_index"] * (len(turns) + 1) + rows["step"])
        order = order[keep[order]]
        rows = {k: v[order] for k, v in rows.items() if v is not None}
        anchors = [anchors[i] for i in order.tolist()]
        next_anchors = [next_anchors[i] for i in order.tolist()]
        traj_ids = rows["env_index"]
        rewards = rows["rewards"]
        returns = torch.zeros(n_traj).index_add_(0, traj_ids, rewards)
        lengths = torch.bincount(traj_ids, minlength=n_traj)
        batch = StepBatch(
            rewards=rewards,
            group_ids=traj_group[traj_ids],
            traj_ids=traj_ids,
            step_ids=rows["step"],
            anchor_ids=intern_strings(anchors),
            invalid=rows["invalid"],
            truncated=rows["truncated"],
            anchor_texts=anchors,
            prompt_ids=rows["prompt_ids"],
            prompt_mask=rows["prompt_mask"],
            response_ids=rows["response_ids"],
            response_mask=rows["response_mask"],
            old_logprobs=rows["logprobs"],
            allowed_tokens=rows.get("allowed_tokens"),
            next_anchor_texts=next_anchors,  # exploration bonuses count them
            extras={
                "success": success,
                "returns": returns,
                "lengths": lengths,
                "traj_group": traj_group,
                "samples": self._samples(turns, env_seeds, success, returns, failed),
                "env_failed": failed,
            },
        )
        ok = ~failed
        metrics = {
            "rollout/success_rate": success[ok].float().mean().item(),
            "rollout/return": returns[ok].mean().item(),
            "rollout/length": lengths[ok].float().mean().item(),
            "rollout/invalid_rate": batch.invalid.float().mean().item(),
            "rollout/env_steps": float(len(batch)),
            "rollout/tokens": float(batch.response_mask.sum()),
            "rollout/env_errors": float(len(errors)),
            "rollout/episodes": float(ok.sum()),  # finished episodes: the weight of the three means above
        }
        return batch, metrics

    def evaluate(
        self,
        seeds: Sequence[int],
        generator: torch.Generator | Sequence[torch.Generator] | None,
        greedy: bool = True,
        temperature: float | None = None,
    ) -> dict[str, float]:
        """One episode per seed (one env each), greedy by default, else sampled at ``temperature`` (None: the
        engine's): the metrics of ``held_out`` (eval/success_rate, eval/return, eval/length, ...)."""
        return table_metrics(self.held_out(seeds, generator, greedy, temperature))

    def held_out(
        self,
        seeds: Sequence[int],
        generator: torch.Generator | Sequence[torch.Generator] | None,
        greedy: bool = True,
        temperature: float | None = None,
    ) -> torch.Tensor:
        """Play one episode per seed (one env each; the envs are kept for the next call), greedy by default,
        else sampled at ``temperature`` (None: the engine's) from ``generator``: one stream, or one per
        episode (``run_episodes``).

        Returns:
            the (E, K) float64 table of the E = len(seeds) episodes, in the order of ``seeds``
            (``gigpo_lab/rollout/held_out.py``); an env that raised leaves its episode marked failed.
        """
        if len(seeds) == 0:
            return empty_table()
        while len(self.eval_envs) < len(seeds):
            self.eval_envs.append(self.env_fn())
        envs = self.eval_envs[: len(seeds)]
        turns, success, errors = run_episodes(
            envs, seeds, self.policy, self.engine, generator, greedy=greedy, temperature=temperature
        )
        failed = self._handle_errors(errors, self.eval_envs, len(envs), "evaluation")
        env_index = torch.cat([t.env_index for t in turns])
        rewards = torch.cat([t.rewards for t in turns])
        kept = ~failed[env_index]
        returns = torch.zeros(len(envs)).index_add_(0, env_index[kept], rewards[kept])
        lengths = torch.bincount(env_index[kept], minlength=len(envs))
        states = intern_strings([a for t in turns for a in t.anchors])
        revisited = revisits(env_index[kept], states[kept], len(envs))
        return episode_table(success & ~failed, returns, lengths, revisited, failed)

    def _handle_errors(
        self, errors: dict[int, EnvError], pool: list[gym.Env], count: int, phase: str
    ) -> torch.Tensor:
        """Log each env error, rebuild the failed envs of ``pool``, and stop when too many of ``count`` failed.

        Returns the (count,) bool mask of the envs that failed. Raises ``EnvFailure`` (chained to the
        first env's exception, its traceback in the message) when more than ``max_env_error_rate`` of the
        trajectories failed, or all of them.
        """
        failed = torch.zeros(count, dtype=torch.bool)
        if not errors:
            return failed
        for err in errors.values():
            log.warning("%s trajectory dropped: %s\n%s", phase, err.describe(), err.traceback)
            failed[err.env_index] = True
        rate = len(errors) / count
        if too_many_errors(len(errors), count, self.max_env_error_rate):
            first = min(errors.values(), key=lambda e: e.env_index)
            raise EnvFailure(
                f"{len(errors)} of {count} {phase} trajectories failed ({rate:.0%} > "
                f"rollout.max_env_error_rate={self.max_env_error_rate}); the first: {first.describe()}. "
                f"Fix the env, or raise rollout.max_env_error_rate to drop such trajectories and go on.\n"
                f"The env's traceback:\n{first.traceback}"
            ) from first.error
        for i in errors:  # a fresh env for the next call: the failed one may be in any state
            try:
                pool[i].close()
            except Exception:  # noqa: S110 - closing a broken env is best effort
                pass
            pool[i] = self.env_fn()
        return failed

    def _samples(
        self,
        turns: Sequence[Turn],
        env_seeds: Sequence[int],
        success: torch.Tensor,
        returns: torch.Tensor,
        failed: torch.Tensor,
    ) -> list[dict]:
        """The first trajectory of each of the first ``SAMPLE_TRAJECTORIES`` groups (not a failed one), as dicts."""
        decode = self.policy.tokenizer.decode
        chosen = [b * self.group_size for b in range(min(SAMPLE_TRAJECTORIES, self.groups))]
        chosen = [t for t in chosen if not failed[t]]
        samples = []
        for traj in chosen:
            steps = []
            for turn in turns:
                hits = (turn.env_index == traj).nonzero()
                if len(hits) == 0:
                    continue
                k = int(hits[0, 0])
                steps.append(
                    {
                        "step": turn.step,
                        "prompt": decode(turn.prompt_ids[k][turn.prompt_mask[k]].tolist()),
                        "action": turn.texts[k],
                        "reward": float(turn.rewards[k]),
                        "invalid": bool(turn.invalid[k]),
                        "anchor": turn.anchors[k],
                    }
                )
            samples.append(
                {
                    "traj_id": traj,
                    "group_id": traj // self.group_size,
                    "seed": env_seeds[traj],
                    "success": bool(success[traj]),
                    "return": float(returns[traj]),
                    "steps": steps,
                }
            )
        return samples

    def close(self) -> None:
        """Close every env."""
        for env in (*self.envs, *self.eval_envs):
            env.close()
