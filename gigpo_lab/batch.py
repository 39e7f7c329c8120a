"""Step rows: the batch vocabulary shared by the collector, the estimators and the loss.

One row is one environment step *t* of one trajectory. The rows of a batch can come in any order.
The layout for one group of G=3 trajectories (A of 3 steps, B of 2, C of 1)::

    row        0    1    2    3    4    5
    group_id   7    7    7    7    7    7      same initial state (same env seed)
    traj_id    0    0    0    1    1    2      unique across the batch
    step_id    0    1    2    0    1    0      t, from 0
    anchor_id  a0   a1   a2   a0   a3   a0     id of the raw observation at t (equal id = same state)
    reward     r    r    r    r    r    r      env reward for this step
    invalid    F    F    F    T    F    F      the text could not be parsed into an action
    truncated  F    F    F    F    T    F      the episode ended here by the time limit, not by the env

Token tensors (``prompt_ids``, ``response_ids``, masks, log-probs) are optional: the estimators only need
the scalar columns; the loss needs the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: The scalar columns an estimator may declare as required, and what fills each one.
COLUMN_PROVIDERS: dict[str, str] = {
    "rewards": "the environment's step reward (the collector fills it)",
    "group_ids": "the collector's episode group (G envs reset with one seed)",
    "traj_ids": "the collector's trajectory index",
    "step_ids": "the collector's turn counter t",
    "anchor_ids": "the env's info['anchor'] (the raw current state); the env must report it",
    "invalid": "the TextActionWrapper's info['invalid'] flag",
    "truncated": "the collector (gymnasium's truncated and not terminated, on an episode's last step)",
    "anchor_texts": "the env's info['anchor'] strings (needed only for anchor_similarity_threshold)",
    "values": "the critic: the policy's value head at each turn's last prompt token, scored by the trainer "
    "with the old log-probs (a policy that can carry a head: model=tiny or a Hugging Face model)",
}


@dataclass
class StepBatch:
    """A flat batch of N step rows.

    Scalar columns, each shape (N,):
        group_ids: int64. traj_ids: int64. step_ids: int64. anchor_ids: int64.
        rewards: float. invalid: bool. truncated: bool, true on the last row of an episode that the time
        limit cut (gymnasium's truncated and not terminated); absent = no episode was cut.
    Optional token columns:
        prompt_ids: (N, P) int64, left-padded; prompt_mask: (N, P) bool.
        response_ids: (N, R) int64, right-padded; response_mask: (N, R) bool.
        old_logprobs / ref_logprobs: (N, R) float, sampling and reference log-probs of the response tokens.
        allowed_tokens: (N, V) bool, the tokens each row's first response token was drawn among (a policy with
            invalid-action masking, ``Policy.allowed_tokens``); None = the whole vocabulary. Every log-prob of
            the row is taken under that restriction.
        advantages: (N,) float, filled by the estimator.
        values: (N,) float, the critic's V(s_t) of each turn before this iteration's updates (``estimator=ppo``;
            the trainer scores them with the old log-probs, no grad). value_targets: (N,) float, the critic's
            regression targets (the GAE returns, ``AdvantageOutput.returns``).
    Non-tensor columns: anchor_texts (list of N str); next_anchor_texts (list of N str, the anchor after each
    row's step: the exploration bonus counts them; an env that raised: the anchor before it).
    ``extras``: per-trajectory values of the collector (``Collector.collect``),
    not sliced by ``select``.
    """

    rewards: torch.Tensor
    group_ids: torch.Tensor
    traj_ids: torch.Tensor
    step_ids: torch.Tensor | None = None
    anchor_ids: torch.Tensor | None = None
    invalid: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    anchor_texts: list[str] | None = None
    next_anchor_texts: list[str] | None = None
    prompt_ids: torch.Tensor | None = None
    prompt_mask: torch.Tensor | None = None
    response_ids: torch.Tensor | None = None
    response_mask: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    allowed_tokens: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    values: torch.Tensor | None = None
    value_targets: torch.Tensor | None = None
    extras: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def columns(self) -> dict[str, object]:
        """The estimator columns of this batch, by the keyword names of ``compute_advantages``."""
        names = (
            "rewards",
            "group_ids",
            "traj_ids",
            "step_ids",
            "anchor_ids",
            "invalid",
            "truncated",
            "anchor_texts",
            "values",
        )
        return {n: getattr(self, n) for n in names}

    def token_columns(self) -> tuple[torch.Tensor, ...]:
        """What ``Policy.logprobs`` scores: prompt_ids, prompt_mask, response_ids, response_mask, and
        allowed_tokens when the rows have it."""
        columns = (self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask)
        return columns if self.allowed_tokens is None else (*columns, self.allowed_tokens)

    def select(self, index: torch.Tensor) -> StepBatch:
        """The rows at ``index`` (shape (M,) int64 or (N,) bool), every tensor column sliced alike."""
        import torch

        if index.dtype == torch.bool:
            index = index.nonzero().squeeze(1)
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                out[f.name] = value[index]
            elif f.name in ("anchor_texts", "next_anchor_texts") and value is not None:
                out[f.name] = [value[i] for i in index.tolist()]
            else:
                out[f.name] = value
        return StepBatch(**out)
