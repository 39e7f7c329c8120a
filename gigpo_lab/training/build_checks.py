"""Checks on the parts ``train`` builds, before any rollout: which batch columns the env lets the collector
fill (checked against what the estimator requires), and whether the policy's tokenizer can end and pad a
response."""

from __future__ import annotations

from omegaconf import DictConfig

#: Columns every collector provides whatever the env; the rest depend on what the env reports.
_BASE_COLUMNS = ("rewards", "group_ids", "traj_ids", "step_ids", "invalid", "truncated")


def check_policy(policy, model_cfg: DictConfig) -> None:
    """Refuse a policy whose tokenizer lacks the special tokens rollouts need (eos ends a response)."""
    tokenizer = policy.tokenizer
    where = f"model.path={model_cfg.path}" if "path" in model_cfg else f"model {model_cfg._target_}"
    if getattr(tokenizer, "eos_id", None) is None:
        raise ValueError(
            f"the tokenizer of {where} has no eos token, so no response could ever end; set eos_token in its "
            "tokenizer_config.json (or use a model whose tokenizer defines one)"
        )
    if getattr(tokenizer, "pad_id", None) is None:
        raise ValueError(
            f"the tokenizer of {where} has no pad token and no eos token to pad with; set pad_token or "
            "eos_token in its tokenizer_config.json"
        )


def env_columns(env) -> set[str]:
    """The batch columns the env lets the collector fill (anchors only if its reset reports one)."""
    _, info = env.reset(seed=0)
    columns = set(_BASE_COLUMNS)
    if "anchor" in info:
        columns |= {"anchor_ids", "anchor_texts"}
    return columns
