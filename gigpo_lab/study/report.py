"""What ``gigpo-lab study analyse`` writes: analysis.md's tables and the plots.

- ``contrast_table``: per contrast, A, B, n, equal pairs, mean A - B [95% CI], P(A > B) [95% CI], d_z, p,
  Holm p, verdict (a dash where none);
- ``forest``: every contrast of the primary metric as its mean difference with its 95% CI, 0 and δ marked;
- ``pairs``: one panel per contrast, A's value against B's per seed, the diagonal marked.
"""

from __future__ import annotations

from pathlib import Path

from gigpo_lab.analysis.plots import _figure, _save
from gigpo_lab.study.analyse import family_metrics
from gigpo_lab.study.spec import Spec


def contrast_table(records: list[dict]) -> list[str]:
    """The records of one family and metric as a Markdown table."""
    lines = [
        "| contrast | A | B | n | equal | mean A - B [95% CI] | P(A > B) [95% CI] | d_z | p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        sides = f"| {r['contrast']} | {' + '.join(r['a'])} | {' + '.join(r['b'])} | {r['n']} |"
        if r["verdict"] == "not run":
            lines.append(f"{sides} | | | | | | not run |")
            continue
        lo, hi = r["ci"]
        plo, phi = r["improvement_ci"]
        lines.append(
            f"{sides} {r['equal']} | {r['mean_difference']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
            f"{r['improvement']:.2f} [{plo:.2f}, {phi:.2f}] | {r['d_z']:.2f} | {r['p']:.4f} | {r['holm_p']:.4f} | "
            f"{r['verdict'] or '—'} |"
        )
    return lines


def arm_table(spec: Spec, records: list[dict]) -> list[str]:
    """The arms' means as a Markdown table."""
    metrics = (spec.metric, *spec.secondary)
    lines = ["| setting | arm | n | " + " | ".join(f"{m} [95% CI]" for m in metrics) + " |",
             "|---|---|---|" + "---|" * len(metrics)]  # fmt: skip
    for r in records:
        cells = [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in (r[m] for m in metrics)]
        lines.append(f"| {r['setting']} | {r['arm']} | {r['n']} | " + " | ".join(cells) + " |")
    return lines


def markdown(spec: Spec, out: dict, notes: list[str], header: list[str]) -> str:
    """analysis.md: the header (registration and amendments), every family, the reruns, the arms, the notes."""
    text = [*header]
    for family in spec.families:
        for metric in family_metrics(spec, family):
            records = out[f"{family.name}/{metric}"]
            registered = metric == spec.family_metric(family)
            role = "registered metric" if registered else "other metric"
            if not family.confirmatory or not registered:
                role += ", not confirmatory"
            text += [f"## Family {family.name}: {metric} ({role})", "", *contrast_table(records), ""]
            if family.must_be_equal:
                text += [f"**{r['contrast']}: {r['n'] - r['equal']} of {r['n']} pairs differ; the registered "
                         "expectation is 0 (any other count is a bug).**" for r in records if r["n"]]  # fmt: skip
                text += [""]
    if out["same_runs"]:
        text += ["## Reruns: the same configuration under two names (a check, not registered)", ""]
        text += [f"- {r['setting']}: {r['copy']} against {r['original']}: {r['same']} of {r['n']} seeds "
                 f"identical on {', '.join(r.get('metrics', ['every metric']))} (any other count: the runs are "
                 "not reproducible)" for r in out["same_runs"]]  # fmt: skip
        text += [""]
    text += [
        "## Arms: each arm's mean over its finished seeds (descriptive)",
        "",
        *arm_table(spec, out["arms"]),
        "",
    ]
    text += [f"- {n}" for n in notes]
    return "\n".join(text) + "\n"


def forest(spec: Spec, out: dict, path: Path) -> Path | None:
    """Every contrast on its family's registered metric: mean A - B with its 95% CI; 0, and ±δ on the primary
    metric, marked. None when no contrast ran."""
    rows = [(f"{f.name}: {r['contrast']}", r) for f in spec.families
            for r in out[f"{f.name}/{spec.family_metric(f)}"] if "ci" in r]  # fmt: skip
    if not rows:
        return None
    fig, (ax,) = _figure(7.0, 0.9 + 0.32 * len(rows))
    for i, (_label, r) in enumerate(reversed(rows)):
        lo, hi = r["ci"]
        color = "tab:blue" if r["metric"] == spec.metric else "tab:gray"
        ax.plot([lo, hi], [i, i], color=color, lw=2)
        ax.plot([r["mean_difference"]], [i], "o", color=color)
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=7)
    ax.axvline(0.0, color="black", lw=0.8)
    for x in (spec.delta, -spec.delta):
        ax.axvline(x, color="tab:red", lw=0.8, ls="--")
    ax.set_xlabel(
        f"mean paired difference A - B [95% CI]; δ = {spec.delta} on {spec.metric} (gray: other metric)"
    )
    ax.set_title(spec.name)
    return _save(fig, path)


def pairs(spec: Spec, out: dict, family_name: str, path: Path) -> Path | None:
    """Per contrast of a family on its registered metric, A's value against B's per seed, y = x marked."""
    family = next(f for f in spec.families if f.name == family_name)
    records = [r for r in out[f"{family.name}/{spec.family_metric(family)}"] if "seeds" in r]
    if not records:
        return None
    fig, axes = _figure(3.0 * len(records), 3.2, ncols=len(records))
    for ax, r in zip(axes, records, strict=True):
        ax.scatter(r["b_values"], r["a_values"], s=10)
        values = r["a_values"] + r["b_values"]
        ax.plot([min(values), max(values)], [min(values), max(values)], color="black", lw=0.8)
        ax.set_title(r["contrast"], fontsize=8)
        ax.set_xlabel(" + ".join(r["b"]), fontsize=7)
        ax.set_ylabel(" + ".join(r["a"]), fontsize=7)
    return _save(fig, path)
