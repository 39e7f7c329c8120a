"""The rollout-engine protocol: batched sampling of responses, with the log-probs of what was sampled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    #: ``generate``'s ``generator``: one generator the whole batch draws from (training rollouts); a sequence of
    #: N, one per prompt row, each row drawing from its own alone (held-out evaluation: a row's tokens then do
    #: not depend on the rows beside it); or None (the engine's own randomness).
    Generators = torch.Generator | Sequence[torch.Generator] | None


@dataclass
class SamplingParams:
    """How responses are sampled.

    Attributes:
        temperature: logits are divided by it before softmax (> 0).
        top_p: nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (0 < top_p <= 1).
        max_new_tokens: the most tokens per response (a stop token ends a row earlier).
        greedy: always take the argmax instead of sampling (``generate(greedy=True)`` asks for it per call;
            ``generate(temperature=t)`` samples one call at another temperature, as sampled evaluation does).
            Greedy log-probs are those of the chosen token under the tempered, nucleus-restricted distribution.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    greedy: bool = False

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature} must be > 0 (use greedy=True for argmax)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 1")


@dataclass
class GenerationOutput:
    """What one ``generate`` call returns, for N prompts and at most R new tokens.

    Attributes:
        response_ids: (N, R) int64, right-padded with the tokenizer's pad id; includes the stop token if one came.
        response_mask: (N, R) bool, True on generated tokens.
        logprobs: (N, R) float, log-prob of each chosen token under the sampling distribution actually used
            (temperature and top_p applied); 0 where masked. At temperature 1 and top_p 1 these equal
            ``policy.logprobs``.
        texts: N decoded responses (special tokens skipped).
    """

    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    texts: list[str]


@runtime_checkable
class Engine(Protocol):
    """What the collector needs from an engine."""

    sampling: SamplingParams

    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        greedy: bool = False,
        generator: Generators = None,
        temperature: float | None = None,
    ) -> GenerationOutput:
        """Sample one response per prompt. prompt_ids (N, P) int64 left-padded; prompt_mask (N, P) bool;
        ``generator``: one for the batch, or N, one per row (``row_generators``); ``temperature`` (> 0) replaces
        ``sampling.temperature`` for this call (None: keep it). A policy with invalid-action masking
        (``Policy.allowed_tokens``) also passes ``allowed`` (N, V) bool, the tokens each row's first response
        token may be; only the torch engine takes it."""
        ...

    def sync_weights(self, policy) -> None:
        """Make the engine sample from ``policy``'s current weights."""
        ...


def row_generators(generator: Generators, rows: int) -> list[torch.Generator] | None:
    """The per-row generators of a ``generate`` call over ``rows`` prompts: ``generator`` as a list of ``rows``
    when it is a sequence, None when it is one generator (or None) for the whole batch.

    Raises:
        ValueError: a sequence whose length is not ``rows``.
    """
    if generator is None or not isinstance(generator, Sequence):
        return None
    if len(generator) != rows:
        raise ValueError(f"generate got {len(generator)} generators for {rows} prompts: one per row, or one")
    return list(generator)


# Optional: ``session()``, a context manager the collector enters around all the ``generate`` calls of one
# collection (``gigpo_lab.rollout.episodes.run_episodes``), during which the weights do not change; the torch
# engine merges LoRA adapters there once instead of once per call.
