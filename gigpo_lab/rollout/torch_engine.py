"""The torch engine: batched autoregressive sampling with the policy's own KV cache, no grad.

The prefill computes shared prompt tokens once (``prefill``: ``shared`` runs identical prompts and the prompts'
common prefix once, ``tree`` every run that a subset shares, ``plain`` the left-padded batch); then one
single-token forward per new token for all rows still running. A row that emits a stop id
(``policy.stop_ids()``) leaves the batch (``policy.select_cache``); generation ends when no row is left or
after ``max_new_tokens``. Shares the policy module, so ``sync_weights`` is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from gigpo_lab.rollout.engine import GenerationOutput, SamplingParams, row_generators

if TYPE_CHECKING:
    from gigpo_lab.policy.base import Policy
    from gigpo_lab.rollout.engine import Generators


def plain_prefill(
    policy: Policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, keep_cache: bool = True
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """The left-padded batch in one forward: logits (N, V) of each prompt's next token, the cache, the mask."""
    logits, cache = policy.forward_logits(prompt_ids, prompt_mask, None, logits_to_keep=1)
    return logits[:, -1], cache, prompt_mask


#: ``rollout.engine.prefill``: how the prompts' cache is filled (all give the same numbers up to rounding).
PREFILLS: tuple[str, ...] = ("plain", "shared", "tree")
#: ``rollout.engine.autocast``: the lower precision sampling may run its matmuls in (``torch.autocast``).
AUTOCASTS: tuple[str, ...] = ("bfloat16",)


def prefill_function(name: str) -> Callable[..., tuple[torch.Tensor, Any, torch.Tensor]]:
    """The prefill called ``name`` (one of ``PREFILLS``); imported here, not when composing a config."""
    from gigpo_lab.packing.prefill import shared_prefill, tree_prefill

    return {"plain": plain_prefill, "shared": shared_prefill, "tree": tree_prefill}[name]


def sampling_log_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probs (N, V) float32 of the distribution sampled from: softmax(logits / temperature), restricted to
    the nucleus (the smallest set of most likely tokens whose probability reaches ``top_p``) and renormalised.
    Tokens outside the nucleus get -inf."""
    import torch
    import torch.nn.functional as F

    scaled = logits.float() / temperature
    if top_p < 1.0:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        # drop a token when the more likely tokens before it already reach top_p (the first is always kept)
        outside = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return F.log_softmax(scaled, dim=-1)


def sample_tokens(
    log_dist: torch.Tensor, generator: torch.Generator | list[torch.Generator] | None
) -> torch.Tensor:
    """One token id per row (N,) int64 drawn from exp(log_dist) (N, V) by inverse-CDF sampling.

    Draws N uniforms from ``generator`` (on the generator's own device), so results depend only on its seed; or,
    given a list of N generators, row k's uniform from the k-th alone, so a row's token does not depend on the
    other rows.
    """
    import torch

    cdf = log_dist.exp().cumsum(-1)
    if isinstance(generator, list):
        u = torch.cat([torch.rand(1, 1, generator=g, device=g.device).to(cdf.device) for g in generator])
    else:
        rand_device = generator.device if generator is not None else cdf.device
        u = torch.rand(cdf.shape[0], 1, generator=generator, device=rand_device).to(cdf.device)
    u = u.clamp(min=1e-12) * cdf[:, -1:]
    return (cdf < u).sum(-1).clamp(max=cdf.shape[1] - 1)


class TorchEngine:
    """Samples responses from a ``Policy`` with its ``forward_logits`` KV cache.

    Args:
        policy: the policy (shared, not copied).
        sampling: temperature, top_p, max_new_tokens (None: ``policy.default_max_new_tokens``), greedy.
        prefill: one of ``PREFILLS``: ``shared`` runs identical prompts and the common prompt prefix once,
            ``tree`` every shared run of the prompts (needs ``Policy.prefill_packed``),
            ``plain`` the left-padded batch (same results up to float rounding).
        merge_lora: sample with the LoRA adapters merged into the base weights (``Policy.merged_weights``): the
            same distribution up to float rounding, without the adapters' extra matmuls.
        autocast: one of ``AUTOCASTS``: sample (training rollouts and evaluation alike) under ``torch.autocast``
            at that dtype (the matmuls in it, the sampling distribution in float32 from its logits); None: at
            the caller's precision (the weights' own inside the training loop).
    """

    def __init__(
        self,
        policy: Policy,
        sampling: SamplingParams,
        *,
        prefill: str = "shared",
        merge_lora: bool = False,
        autocast: str | None = None,
    ):
        if prefill not in PREFILLS:
            raise ValueError(f"rollout.engine.prefill={prefill!r} is not one of {list(PREFILLS)}")
        if autocast is not None and autocast not in AUTOCASTS:
            raise ValueError(f"rollout.engine.autocast={autocast!r} is not null or one of {list(AUTOCASTS)}")
        self.policy = policy
        self.sampling = sampling
        self.prefill = prefill
        self.merge_lora = merge_lora
        self.autocast = autocast
        self._merged = False  # inside a session that merged the adapters already

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A block of many ``generate`` calls (a collection's turns): with ``merge_lora`` the adapters are merged
        once for all of them instead of once per call. The weights must not change inside the block."""
        if not self.merge_lora or self._merged:
            yield
            return
        with self.policy.merged_weights():
            self._merged = True
            try:
                yield
            finally:
                self._merged = False

    @property
    def samples_policy_logprobs(self) -> bool:
        """Whether the returned log-probs are ``policy.logprobs`` at the sampling temperature (up to float
        rounding, or bf16 rounding under ``autocast``: then an update at float32 that reuses them starts from a
        ratio that is not exactly 1): the engine runs the trained module itself, so only a nucleus (top_p < 1)
        changes them."""
        return self.sampling.top_p >= 1.0

    @property
    def max_new_tokens(self) -> int:
        return self.sampling.max_new_tokens or self.policy.default_max_new_tokens

    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        greedy: bool = False,
        generator: Generators = None,
        temperature: float | None = None,
        allowed: torch.Tensor | None = None,
    ) -> GenerationOutput:
        """Sample one response per prompt (greedy if ``greedy`` or ``sampling.greedy``), at ``temperature``
        (None: ``sampling.temperature``), the first token among ``allowed`` (N, V) bool when given (invalid-action
        masking, ``Policy.allowed_tokens``: the log-probs are those of the restricted distribution).

        A row leaves the batch (its cache rows are dropped) as soon as it emits a stop id.

        Args:
            prompt_ids: (N, P) int64, left-padded. prompt_mask: (N, P) bool.
            generator: the RNG of the sampling (its device may differ from the model's): one for the batch, or
                N, one per row (``engine.row_generators``), each row's tokens drawn from its own.
        Returns:
            ``GenerationOutput`` with (N, R) tensors on the prompts' device, R <= max_new_tokens.
        """
        import torch

        # without the option no autocast context is entered: the caller's precision stays in force. The session
        # (merge_lora's merge) opens outside the autocast, so the merged weights stay at the weights' dtype.
        cast = self.autocast and torch.autocast(self.policy.device.type, getattr(torch, self.autocast))
        with torch.no_grad(), self.session(), cast or contextlib.nullcontext():
            return self._generate(prompt_ids, prompt_mask, greedy, generator, temperature, allowed)

    def _generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        greedy: bool,
        generator: Generators,
        temperature: float | None,
        allowed: torch.Tensor | None = None,
    ) -> GenerationOutput:
        import torch

        policy, sampling = self.policy, self.sampling
        own = row_generators(generator, prompt_ids.shape[0])  # per row: follows its row out of the batch
        greedy = greedy or sampling.greedy
        tau = sampling.temperature if temperature is None else temperature
        out_device, device = prompt_ids.device, policy.device
        n, budget = prompt_ids.shape[0], self.max_new_tokens
        was_training = policy.training
        policy.eval()
        try:
            ids, mask = prompt_ids.to(device), prompt_mask.to(device=device, dtype=torch.bool)
            prefill = prefill_function(self.prefill)
            logits, cache, mask = prefill(policy, ids, mask, keep_cache=budget > 1)
            stop = torch.tensor(policy.stop_ids(), device=device)
            response_ids = torch.full((n, budget), policy.tokenizer.pad_id, dtype=torch.long, device=device)
            response_mask = torch.zeros(n, budget, dtype=torch.bool, device=device)
            logprobs = torch.zeros(n, budget, device=device)
            rows = torch.arange(n, device=device)  # batch row -> output row
            if allowed is not None:
                from gigpo_lab.packing.logprobs import restrict_logits

                logits = restrict_logits(logits, allowed)
            for step in range(budget):
                log_dist = sampling_log_probs(logits, tau, sampling.top_p)
                token = log_dist.argmax(-1) if greedy else sample_tokens(log_dist, own or generator)
                response_ids[rows, step] = token
                response_mask[rows, step] = True
                logprobs[rows, step] = log_dist.gather(-1, token[:, None]).squeeze(-1)
                stopped = torch.isin(token, stop)
                if step + 1 == budget or bool(stopped.all()):
                    break
                if bool(stopped.any()):
                    keep = (~stopped).nonzero().squeeze(1)
                    cache = policy.select_cache(cache, keep)
                    rows, mask, token = rows[keep], mask[keep], token[keep]
                    if own is not None:
                        own = [own[k] for k in keep.tolist()]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                logits, cache = policy.forward_logits(token[:, None], mask, cache, logits_to_keep=1)
                logits = logits[:, -1]
        finally:
            policy.train(was_training)
        width = step + 1
        response_ids = response_ids[:, :width].to(out_device)
        response_mask = response_mask[:, :width].to(out_device)
        lengths = response_mask.sum(1).tolist()
        texts = [
            policy.tokenizer.decode(row[:k]) for row, k in zip(response_ids.tolist(), lengths, strict=True)
        ]
        return GenerationOutput(response_ids, response_mask, logprobs[:, :width].to(out_device), texts)

    def sync_weights(self, policy: Policy) -> None:
        """No-op: the engine samples from the very module being trained."""


def build_torch_engine(
    policy: Policy,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
    greedy: bool = False,
    prefill: str | None = None,
    merge_lora: bool = False,
    autocast: str | None = None,
) -> TorchEngine:
    """The engine target of the ``rollout=torch`` option (a schema, ``TorchRolloutConfig`` in ``rollout/schema.py``,
    with no YAML file): ``instantiate(cfg.rollout.engine)(policy=policy)``.

    ``max_new_tokens=None`` takes ``policy.default_max_new_tokens`` (tiny: 1, hf: 32); ``prefill=None``
    takes ``policy.default_prefill`` (tiny: tree, hf: shared).
    """
    if max_new_tokens is None:
        max_new_tokens = policy.default_max_new_tokens
    if prefill is None:
        prefill = policy.default_prefill
    sampling = SamplingParams(temperature, top_p, max_new_tokens, greedy)
    return TorchEngine(policy, sampling, prefill=prefill, merge_lora=merge_lora, autocast=autocast)
