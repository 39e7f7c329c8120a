"""Per-token log-probs and entropies of a response, from the logits that predict it: every scorer's last step."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def response_logprobs(
    logits: torch.Tensor, response_ids: torch.Tensor, response_mask: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the response tokens from the logits that predict them.

    Args:
        logits: (N, R, V), row j predicting ``response_ids[:, j]``.
        response_ids: (N, R) int64; response_mask: (N, R) bool.
    Returns:
        logp (N, R) and entropy (N, R) float, 0 where masked (as ``Policy.logprobs``).
    """
    logits = logits.float() / temperature
    log_norm = logits.logsumexp(-1)
    logp = logits.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1) - log_norm
    # H = log Z - E_p[logit], finite even where some probabilities underflow to 0.
    entropy = log_norm - (F.softmax(logits, dim=-1) * logits).sum(-1)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return torch.where(response_mask, logp, zero), torch.where(response_mask, entropy, zero)
