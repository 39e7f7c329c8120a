"""Checks on the parts ``train`` builds, before any rollout: which batch columns the env lets the collector
fill (checked against what the estimator requires), whether the policy's tokenizer can end and pad a
response, and whether the policy can carry the value head an estimator with a critic needs."""

from __future__ import annotations

from omegaconf import DictConfig

#: Columns every collector provides whatever the env; the rest depend on what the env reports.
_BASE_COLUMNS = ("rewards", "group_ids", "traj_ids", "step_ids", "invalid", "truncated")
#: Columns the trainer fills from its own policy, whatever the env and the rollout engine: the critic's values
#: (the trainer's policy scores them with the old log-probs, so an engine that only samples, vLLM, is fine);
#: ``check_value_head`` checks the built policy can carry the head.
POLICY_COLUMNS = ("values",)


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


def check_value_head(estimator, policy, model_cfg: DictConfig) -> None:
    """Refuse an estimator that needs the critic's ``values`` (ppo) on a policy that cannot carry a value head
    (it exposes no hidden state: ``Policy.prompt_hidden``), in one sentence naming the fix."""
    if "values" not in estimator.requires or getattr(policy, "can_serve_value_head", False):
        return
    where = f"model.path={model_cfg.path}" if "path" in model_cfg else f"model {model_cfg._target_}"
    raise ValueError(
        f"estimator={estimator.name} needs a value head on the policy, and {where} ({type(policy).__name__}) "
        "exposes no hidden state for one (Policy.prompt_hidden); use model=tiny or model=hf, or a critic-free "
        "estimator such as estimator=gigpo"
    )


def env_columns(env) -> set[str]:
    """The batch columns the env lets the collector fill (anchors only if its reset reports one)."""
    _, info = env.reset(seed=0)
    columns = set(_BASE_COLUMNS)
    if "anchor" in info:
        columns |= {"anchor_ids", "anchor_texts"}
    return columns
