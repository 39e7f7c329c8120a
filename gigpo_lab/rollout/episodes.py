"""Run a set of envs to the end of their episodes with one batched ``engine.generate`` per turn.

Each turn, the still-active envs build their prompts, the engine answers all of them at once, and the envs
are stepped with the decoded texts. What a turn produced is kept as a ``Turn`` (tensors over its n active
envs); ``stack_turns`` pads and concatenates turns into flat step rows.

Faults: an env whose ``step`` raises ends its episode there and is reported in ``EnvError`` (the caller
drops that trajectory); a reward that is NaN or infinite stops everything with a ``FloatingPointError``
naming the env, its reset seed and the step.
"""

from __future__ import annotations

import contextlib
import math
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import torch
import torch.nn.functional as F

from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy.base import Policy
from gigpo_lab.rollout.engine import row_generators

#: A guard against envs that never end (make_env's ``max_turns`` normally ends every episode far sooner).
MAX_EPISODE_STEPS = 10_000


@dataclass
class Turn:
    """One engine call over the n envs active at turn ``step``.

    Attributes:
        env_index: (n,) int64, which envs. step: the turn number t (0-based, the same for all n).
        prompt_ids / prompt_mask: (n, P) left-padded. response_ids / response_mask / logprobs: (n, R).
        rewards: (n,) float32. invalid: (n,) bool. anchors: n anchor strings before the step.
        truncated: (n,) bool, the episode ended at this step by the time limit (truncated, not terminated).
        observations / texts: n prompt observations and decoded responses.
        next_anchors: n anchor strings after the step (an env that raised: the anchor before it).
        allowed: (n, V) bool, the tokens each row's first response token was drawn among
            (``policy.allowed_tokens``), or None: the whole vocabulary.
    """

    env_index: torch.Tensor
    step: int
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    invalid: torch.Tensor
    truncated: torch.Tensor
    anchors: list[str]
    observations: list[str]
    texts: list[str]
    next_anchors: list[str]
    allowed: torch.Tensor | None = None


@dataclass
class EnvError:
    """An env that raised in ``step``: which one, where, and the traceback."""

    env_index: int
    env: str
    seed: int
    step: int
    error: BaseException
    traceback: str

    def describe(self) -> str:
        return (
            f"env {self.env} (env {self.env_index}, reset seed {self.seed}) raised at step {self.step}: "
            f"{type(self.error).__name__}: {self.error}"
        )


def env_label(env: gym.Env) -> str:
    """``name (id)`` of an env, for messages: ``frozenlake (gigpo_lab/FrozenLake-v0)``."""
    spec = getattr(env, "spec", None) or getattr(env.unwrapped, "spec", None)
    try:
        name = env.get_wrapper_attr("name")  # TextActionWrapper's short name, through outer wrappers
    except AttributeError:
        name = None
    ident = spec.id if spec is not None else type(env.unwrapped).__name__
    return f"{name} ({ident})" if name else ident


def _decoding(greedy: bool, temperature: float | None) -> dict:
    """The decoding keywords of ``engine.generate``: ``temperature`` only when set (an engine written before it
    takes ``greedy`` alone)."""
    return {"greedy": greedy} if temperature is None else {"greedy": greedy, "temperature": temperature}


def allowed_rows(policy: Policy, admissible: Sequence[Sequence[str]]) -> torch.Tensor | None:
    """(n, V) bool, row k the tokens ``policy.allowed_tokens(admissible[k])`` (a row it leaves unrestricted: all
    True), or None when it restricts no row (a policy without invalid-action masking)."""
    rows = [policy.allowed_tokens(commands) for commands in admissible]
    return _concat_masks([None if r is None else r[None] for r in rows], [1] * len(rows))


def _concat_masks(masks: Sequence[torch.Tensor | None], counts: Sequence[int]) -> torch.Tensor | None:
    """Concatenate (counts[k], V) bool masks along rows, a None part standing for counts[k] unrestricted rows
    (all True); None when every part is None."""
    if all(m is None for m in masks):
        return None
    width = next(m for m in masks if m is not None).shape[1]
    return torch.cat(
        [
            torch.ones(n, width, dtype=torch.bool) if m is None else m
            for m, n in zip(masks, counts, strict=True)
        ]
    )


def run_episodes(
    envs: Sequence[gym.Env],
    seeds: Sequence[int],
    policy: Policy,
    engine,
    generator: torch.Generator | Sequence[torch.Generator] | None,
    greedy: bool = False,
    temperature: float | None = None,
) -> tuple[list[Turn], torch.Tensor, dict[int, EnvError]]:
    """Reset ``envs[i]`` with ``seeds[i]`` and play every episode to termination or truncation, inside the
    engine's ``session()`` if it has one (the torch engine merges LoRA adapters once for all the turns).
    Returns and raises as ``play_episodes``."""
    session = getattr(engine, "session", None)
    with session() if session is not None else contextlib.nullcontext():
        return play_episodes(envs, seeds, policy, engine, generator, greedy, temperature)


def play_episodes(
    envs: Sequence[gym.Env],
    seeds: Sequence[int],
    policy: Policy,
    engine,
    generator: torch.Generator | Sequence[torch.Generator] | None,
    greedy: bool = False,
    temperature: float | None = None,
) -> tuple[list[Turn], torch.Tensor, dict[int, EnvError]]:
    """Reset ``envs[i]`` with ``seeds[i]`` and play every episode to termination or truncation, by argmax
    (``greedy``) or sampling at ``temperature`` (None: the engine's own). ``generator``: one stream every turn's
    batch draws from, or ``len(envs)`` streams, episode i's tokens drawn from the i-th alone (each turn hands the
    engine those of its active envs), so an episode plays the same whichever episodes it is played beside.

    Returns:
        the turns in order; success (len(envs),) bool: ``info["success"]`` after each env's last step; and
        the envs whose ``step`` raised (their episode ends there; their rows in ``turns`` are placeholders
        after the last good step, for the caller to drop).

    Raises:
        FloatingPointError: an env returned a NaN or infinite reward (names the env, seed and step).
    """
    own = row_generators(generator, len(envs))
    observations, anchors, admissible = [], [], []
    for env, seed in zip(envs, seeds, strict=True):
        obs, info = env.reset(seed=int(seed))
        observations.append(obs)
        anchors.append(info["anchor"])
        admissible.append(info.get("admissible_actions", ()))
    history: list[list[tuple[str, str]]] = [[] for _ in envs]
    success = torch.zeros(len(envs), dtype=torch.bool)
    errors: dict[int, EnvError] = {}
    active = list(range(len(envs)))
    turns: list[Turn] = []
    pad_id = policy.tokenizer.pad_id
    for step in range(MAX_EPISODE_STEPS):
        if not active:
            return turns, success, errors
        prompts = [policy.build_prompt(observations[i], anchors[i], history[i]) for i in active]
        prompt_ids, prompt_mask = left_pad(prompts, pad_id)
        streams = generator if own is None else [own[i] for i in active]
        allowed = allowed_rows(policy, [admissible[i] for i in active])
        masking = {} if allowed is None else {"allowed": allowed}
        out = engine.generate(
            prompt_ids, prompt_mask, **_decoding(greedy, temperature), generator=streams, **masking
        )
        rewards, invalid, cut, turn_anchors, turn_obs, still_active = [], [], [], [], [], []
        next_anchors = []
        for i, text in zip(active, out.texts, strict=True):
            try:
                obs, reward, terminated, truncated, info = envs[i].step(text)
            except Exception as err:  # the env failed: end this trajectory, keep the others going
                errors[i] = EnvError(i, env_label(envs[i]), int(seeds[i]), step, err, traceback.format_exc())
                rewards.append(0.0)
                invalid.append(False)
                cut.append(False)
                turn_anchors.append(anchors[i])
                turn_obs.append(observations[i])
                next_anchors.append(anchors[i])
                continue
            if not math.isfinite(float(reward)):
                raise FloatingPointError(
                    f"env {env_label(envs[i])} returned reward {float(reward)} at step {step} of the episode "
                    f"reset with seed {int(seeds[i])} (env {i}, action {text!r}); rewards must be finite. "
                    "The checkpoint before this iteration is kept"
                )
            rewards.append(float(reward))
            invalid.append(bool(info.get("invalid", False)))
            cut.append(bool(truncated) and not bool(terminated))
            turn_anchors.append(anchors[i])
            turn_obs.append(observations[i])
            history[i].append((observations[i], text))
            observations[i], anchors[i] = obs, info["anchor"]
            admissible[i] = info.get("admissible_actions", ())
            next_anchors.append(anchors[i])
            if terminated or truncated:
                success[i] = bool(info.get("success", False))
            else:
                still_active.append(i)
        turns.append(
            Turn(
                env_index=torch.tensor(active, dtype=torch.long),
                step=step,
                prompt_ids=prompt_ids,
                prompt_mask=prompt_mask,
                response_ids=out.response_ids.cpu(),
                response_mask=out.response_mask.cpu(),
                logprobs=out.logprobs.float().cpu(),
                rewards=torch.tensor(rewards, dtype=torch.float32),
                invalid=torch.tensor(invalid, dtype=torch.bool),
                truncated=torch.tensor(cut, dtype=torch.bool),
                anchors=turn_anchors,
                observations=turn_obs,
                texts=list(out.texts),
                next_anchors=next_anchors,
                allowed=allowed,
            )
        )
        active = still_active
    raise RuntimeError(f"episodes still running after {MAX_EPISODE_STEPS} steps; give the env a max_turns")


def stack_turns(turns: Sequence[Turn], pad_id: int) -> dict[str, torch.Tensor]:
    """Concatenate the turns' rows: prompts left-padded and responses right-padded to the widest turn.

    Returns tensors over all M rows: env_index, step (M,) int64; prompt_ids/prompt_mask (M, P);
    response_ids/response_mask/logprobs (M, R); rewards (M,) float32; invalid, truncated (M,) bool; and
    allowed_tokens (M, V) bool when any turn restricted its tokens (a turn that did not: all True), else None.
    """
    width_p = max(t.prompt_ids.shape[1] for t in turns)
    width_r = max(t.response_ids.shape[1] for t in turns)

    def cat(name: str, width: int, left: bool, value) -> torch.Tensor:
        padded = []
        for t in turns:
            x = getattr(t, name)
            extra = width - x.shape[1]
            padded.append(F.pad(x, (extra, 0) if left else (0, extra), value=value))
        return torch.cat(padded)

    return {
        "env_index": torch.cat([t.env_index for t in turns]),
        "step": torch.cat([torch.full_like(t.env_index, t.step) for t in turns]),
        "prompt_ids": cat("prompt_ids", width_p, True, pad_id),
        "prompt_mask": cat("prompt_mask", width_p, True, False),
        "response_ids": cat("response_ids", width_r, False, pad_id),
        "response_mask": cat("response_mask", width_r, False, False),
        "logprobs": cat("logprobs", width_r, False, 0.0),
        "rewards": torch.cat([t.rewards for t in turns]),
        "invalid": torch.cat([t.invalid for t in turns]),
        "truncated": torch.cat([t.truncated for t in turns]),
        "allowed_tokens": _stack_allowed(turns),
    }


def _stack_allowed(turns: Sequence[Turn]) -> torch.Tensor | None:
    """The turns' ``allowed`` rows (M, V) bool, a turn without them all True; None when no turn has them."""
    return _concat_masks([t.allowed for t in turns], [len(t.env_index) for t in turns])
