"""Advantage estimators: grpo, rloo, reinforce_pp, gigpo and gigpo_step_index (see ALGORITHMS.md).

Two ways in, one code path:

    from gigpo_lab.algorithm import compute_advantages, build_estimator
    adv = compute_advantages("gigpo", rewards=r, group_ids=g, traj_ids=j, step_ids=t, anchor_ids=a)
    out = build_estimator("gigpo", step_advantage_weight=0.6)(batch)   # AdvantageOutput(advantages, metrics)

Importing this package needs torch only. Each estimator module declares its schema (``SCHEMAS``) next to its
class; the registry imports every module of the package before a lookup, so nothing else lists them.
"""

from gigpo_lab.algorithm.base import AdvantageOutput, Estimator
from gigpo_lab.algorithm.functional import compute_advantages
from gigpo_lab.algorithm.gigpo import GiGPO
from gigpo_lab.algorithm.grouping import group_normalize
from gigpo_lab.algorithm.grpo import GRPO
from gigpo_lab.algorithm.prepare import MissingColumnError
from gigpo_lab.algorithm.registry import (
    available_estimators,
    build_estimator,
    check_requirements,
    estimator_params,
    get_estimator_class,
    register_estimator,
)
from gigpo_lab.algorithm.reinforce_pp import ReinforcePP
from gigpo_lab.algorithm.returns import discounted_returns
from gigpo_lab.algorithm.rloo import RLOO
from gigpo_lab.algorithm.step_index import GiGPOStepIndex

__all__ = [
    "GRPO",
    "RLOO",
    "AdvantageOutput",
    "Estimator",
    "GiGPO",
    "GiGPOStepIndex",
    "MissingColumnError",
    "ReinforcePP",
    "available_estimators",
    "build_estimator",
    "check_requirements",
    "compute_advantages",
    "discounted_returns",
    "estimator_params",
    "get_estimator_class",
    "group_normalize",
    "register_estimator",
]
