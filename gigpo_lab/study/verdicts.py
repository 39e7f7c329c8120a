"""Verdict rules: the registry a spec's ``verdict`` key names. Each rule maps one contrast's Holm-adjusted p,
mean difference and CI to a verdict, given the spec's α and δ (in the primary metric's units)."""

from __future__ import annotations

from collections.abc import Callable


def delta_rule(holm_p: float, mean: float, high: float, alpha: float, delta: float) -> str:
    """The rule of the registered study (issue #47), in this order:

    - **reproduced**: Holm-adjusted p < α and the mean difference A - B is positive (A better, as claimed);
    - **refuted**: the CI's upper end is below δ: an effect that large in the claimed direction is excluded
      (this includes a significant difference the other way);
    - **inconclusive at this power**: anything else.
    """
    if holm_p < alpha and mean > 0:
        return "reproduced"
    if high < delta:
        return "refuted"
    return "inconclusive at this power"


#: name -> rule: a spec's ``verdict`` key.
RULES: dict[str, Callable[[float, float, float, float, float], str]] = {"delta": delta_rule}
