"""The collector: B groups x G envs played through the engine, returned as one ``StepBatch`` of step rows.

Env layout (B=2, G=3): env i belongs to group i // G and is reset with ``seeds[i // G]``::

    env / traj_id   0  1  2 | 3  4  5
    group_id        0  0  0 | 1  1  1
    reset seed      s0 s0 s0| s1 s1 s1

Rows come out sorted by (traj_id, step_id). ``anchor_ids`` number the distinct anchor strings of the batch
in order of first appearance, so equal strings get equal ids (across groups too; estimators group within
``group_id``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
import torch

from gigpo_lab.batch import StepBatch
from gigpo_lab.policy.base import Policy
from gigpo_lab.rollout.episodes import Turn, run_episodes, stack_turns

#: Trajectories copied into ``extras["samples"]`` (the first of each of the first groups).
SAMPLE_TRAJECTORIES = 2


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
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        policy: Policy,
        engine,
        *,
        groups: int,
        group_size: int,
    ):
        if groups < 1 or group_size < 1:
            raise ValueError(f"groups={groups} and group_size={group_size} must both be >= 1")
        self.env_fn, self.policy, self.engine = env_fn, policy, engine
        self.groups, self.group_size = groups, group_size
        self.envs = [env_fn() for _ in range(groups * group_size)]
        self.eval_envs: list[gym.Env] = []

    def collect(self, seeds: Sequence[int], generator: torch.Generator) -> tuple[StepBatch, dict[str, float]]:
        """Play one episode in each of the B x G envs; the G envs of group b are reset with ``seeds[b]``.

        Returns:
            the ``StepBatch`` of all N step rows (token columns, ``old_logprobs`` = the engine's sampling
            log-probs, scalar columns, ``anchor_texts``) with per-trajectory ``extras`` ("success", "returns",
            "lengths", "traj_group": (B*G,) tensors; "samples": JSON-able dicts), and the rollout metrics.
        """
        if len(seeds) != self.groups:
            raise ValueError(f"collect got {len(seeds)} seeds for groups={self.groups}")
        n_traj = self.groups * self.group_size
        traj_group = torch.arange(n_traj) // self.group_size
        env_seeds = [int(seeds[b]) for b in traj_group.tolist()]
        turns, success = run_episodes(self.envs, env_seeds, self.policy, self.engine, generator)
        rows = stack_turns(turns, self.policy.tokenizer.pad_id)
        anchors = [a for t in turns for a in t.anchors]

        order = torch.argsort(rows["env_index"] * (len(turns) + 1) + rows["step"])
        rows = {k: v[order] for k, v in rows.items()}
        anchors = [anchors[i] for i in order.tolist()]
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
            anchor_texts=anchors,
            prompt_ids=rows["prompt_ids"],
            prompt_mask=rows["prompt_mask"],
            response_ids=rows["response_ids"],
            response_mask=rows["response_mask"],
            old_logprobs=rows["logprobs"],
            extras={
                "success": success,
                "returns": returns,
                "lengths": lengths,
                "traj_group": traj_group,
                "samples": self._samples(turns, env_seeds, success, returns),
            },
        )
        metrics = {
            "rollout/success_rate": success.float().mean().item(),
            "rollout/return": returns.mean().item(),
            "rollout/length": lengths.float().mean().item(),
            "rollout/invalid_rate": batch.invalid.float().mean().item(),
            "rollout/env_steps": float(len(batch)),
            "rollout/tokens": float(batch.response_mask.sum()),
        }
        return batch, metrics

    def evaluate(
        self, seeds: Sequence[int], generator: torch.Generator, greedy: bool = True
    ) -> dict[str, float]:
        """One episode per seed (one env each), greedy by default: eval/success_rate, eval/return, eval/length."""
        while len(self.eval_envs) < len(seeds):
            self.eval_envs.append(self.env_fn())
        envs = self.eval_envs[: len(seeds)]
        turns, success = run_episodes(envs, seeds, self.policy, self.engine, generator, greedy=greedy)
        env_index = torch.cat([t.env_index for t in turns])
        returns = torch.zeros(len(envs)).index_add_(0, env_index, torch.cat([t.rewards for t in turns]))
        lengths = torch.bincount(env_index, minlength=len(envs))
        return {
            "eval/success_rate": success.float().mean().item(),
            "eval/return": returns.mean().item(),
            "eval/length": lengths.float().mean().item(),
        }

    def _samples(
        self, turns: Sequence[Turn], env_seeds: Sequence[int], success: torch.Tensor, returns: torch.Tensor
    ) -> list[dict]:
        """The first trajectory of each of the first ``SAMPLE_TRAJECTORIES`` groups, as JSON-able dicts."""
        decode = self.policy.tokenizer.decode
        chosen = [b * self.group_size for b in range(min(SAMPLE_TRAJECTORIES, self.groups))]
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
