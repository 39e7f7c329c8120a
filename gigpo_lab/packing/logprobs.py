"""Per-token log-probs and entropies of a response, from the logits that predict it: every scorer's last step."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def response_logprobs(
    logits: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the response tokens from the logits that predict them.

    Args:
        logits: (N, R, V), row j predicting ``response_ids[:, j]``.
        response_ids: (N, R) int64; response_mask: (N, R) bool.
        allowed: (N, V') bool, V' <= V, or None: the tokens each row's first response token may be (invalid-action
            masking, ``Policy.allowed_tokens``); the first position's distribution is renormalised over them, as
            the engine sampled it. Later positions, and tokens from V' on, are not restricted / are excluded.
    Returns:
        logp (N, R) and entropy (N, R) float, 0 where masked (as ``Policy.logprobs``).
    """
    logits = logits.float() / temperature
    if allowed is not None:
        logits = torch.cat([restrict_logits(logits[:, 0], allowed)[:, None], logits[:, 1:]], dim=1)
    log_norm = logits.logsumexp(-1)
    logp = logits.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1) - log_norm
    # H = log Z - E_p[logit], finite even where some probabilities underflow to 0; a token masked to -inf has
    # probability 0 and adds nothing (0 * -inf would be NaN).
    finite = logits if allowed is None else logits.masked_fill(logits == float("-inf"), 0.0)
    entropy = log_norm - (F.softmax(logits, dim=-1) * finite).sum(-1)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return torch.where(response_mask, logp, zero), torch.where(response_mask, entropy, zero)


def restrict_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``logits`` (N, V) with -inf outside ``allowed`` (N, V') bool, V' <= V (columns from V' on are outside)."""
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep[:, : allowed.shape[1]] = allowed.to(logits.device)
    return logits.masked_fill(~keep, float("-inf"))
