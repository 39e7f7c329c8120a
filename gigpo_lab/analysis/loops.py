"""Where a greedy policy loops, and what it believes there.

``eval/revisit_rate`` says how often greedy evaluation loops (docs/WHY_RUNS_FAIL.md, "Greedy evaluation
loops"); this says where. For each failed greedy episode it finds the first state the episode came back to,
and lists the cycle: state, action text, next state, and, for a policy whose every action name is one token
(the tiny policy's word tokenizer), the policy's probability of each action there. A near-tie between two
actions, or a wrong argmax at one rarely trained state, then shows directly. ``experiments/greedy_loops.py``
prints it for a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def first_loop(anchors: Sequence[str]) -> tuple[int, int] | None:
    """The first cycle of an episode's states: ``(j, i)`` where ``anchors[i]`` is the first state seen before,
    at ``j`` (so steps ``j .. i-1`` lead from it back to it); None if no state repeats."""
    seen: dict[str, int] = {}
    for i, anchor in enumerate(anchors):
        if anchor in seen:
            return seen[anchor], i
        seen[anchor] = i
    return None


def action_token_ids(tokenizer, action_names: Sequence[str]) -> list[int] | None:
    """The token id of each action name, or None if some name is not exactly one known token (then no
    per-action probabilities are computed)."""
    ids = []
    for name in action_names:
        encoded = tokenizer.encode(name)
        if len(encoded) != 1 or encoded[0] == getattr(tokenizer, "unk_id", None):
            return None
        ids.append(encoded[0])
    return ids


@torch.no_grad()
def action_probabilities(
    policy,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    action_ids: Sequence[int],
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The policy's probability of answering each action, at one state.

    The response of action a is the given response with its first token replaced by a's token, so the rest
    (the stop token) is scored as the policy ended its own answer.

    Args:
        prompt_ids / prompt_mask: (1, P), one state's prompt as the rollout built it.
        response_ids / response_mask: (1, R), the response the policy gave there.
        action_ids: A token ids, one per action name.
        allowed: (1, V) bool, the tokens the answer was drawn among (``Turn.allowed``, a policy with
            invalid-action masking), or None: the whole vocabulary.
    Returns:
        (A,) float, the probability of each whole response; their sum is at most 1.
    """
    a = len(action_ids)
    responses = response_ids.repeat(a, 1)
    responses[:, 0] = torch.as_tensor(action_ids, dtype=responses.dtype)
    mask = response_mask.repeat(a, 1)
    columns = (prompt_ids.repeat(a, 1), prompt_mask.repeat(a, 1), responses, mask)
    if allowed is not None:
        columns = (*columns, allowed.repeat(a, 1))
    logp, _ = policy.logprobs(*columns)
    return (logp * mask).sum(1).exp()


def greedy_loops(turns, success: torch.Tensor, policy, action_names: Sequence[str]) -> list[dict]:
    """The first loop of every failed episode of a ``run_episodes`` result.

    Args:
        turns: the ``Turn`` list of ``run_episodes``; success: (E,) bool, per episode.
        policy: the policy that played them (for the probabilities); action_names: the env's.
    Returns:
        one dict per failed episode that looped: ``episode``, ``start`` (the turn the cycle starts at) and
        ``cycle``, a list of ``{state, action, next_state, probabilities}`` (``probabilities``: action name ->
        probability, or None when the action names are not single tokens).
    """
    steps: dict[int, list[tuple]] = {}
    for turn in turns:
        for j, e in enumerate(turn.env_index.tolist()):
            steps.setdefault(e, []).append((turn, j))
    ids = action_token_ids(policy.tokenizer, action_names)
    out = []
    for e in sorted(steps):
        if bool(success[e]):
            continue
        rows = steps[e]
        found = first_loop([turn.anchors[j] for turn, j in rows])
        if found is None:
            continue
        cycle = []
        for turn, j in rows[found[0] : found[1]]:
            probs = None
            if ids is not None:
                p = action_probabilities(
                    policy,
                    turn.prompt_ids[j : j + 1],
                    turn.prompt_mask[j : j + 1],
                    turn.response_ids[j : j + 1],
                    turn.response_mask[j : j + 1],
                    ids,
                    None if turn.allowed is None else turn.allowed[j : j + 1],
                )
                probs = dict(zip(action_names, p.tolist(), strict=True))
            cycle.append(
                {
                    "state": turn.anchors[j],
                    "action": turn.texts[j],
                    "next_state": turn.next_anchors[j],
                    "probabilities": probs,
                }
            )
        out.append({"episode": e, "start": found[0], "cycle": cycle})
    return out
