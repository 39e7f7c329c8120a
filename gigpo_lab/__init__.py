"""gigpo_lab: group-based policy-gradient estimators (GRPO, RLOO, REINFORCE++, GiGPO) for multi-turn agents."""

__version__ = "0.1.0"
