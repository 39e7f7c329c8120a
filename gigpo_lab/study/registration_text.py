"""The human-readable registration, generated from the spec: ``<spec>.md`` beside it. The text and the code
are one source, so they cannot disagree; ``check_text`` says whether the file on disk is stale."""

from __future__ import annotations

import inspect
from pathlib import Path

from gigpo_lab.study import registration
from gigpo_lab.study.spec import LoadedSpec
from gigpo_lab.study.verdicts import RULES


def render(loaded: LoadedSpec) -> str:
    """The registration of the spec as Markdown."""
    spec = loaded.spec
    rule = inspect.getdoc(RULES[spec.verdict]) or spec.verdict
    # the spec's range, unless no family uses it (each sets its own): then the families' ranges. A spec where
    # some family uses it (gigpo_claims, registered before this) keeps its text byte for byte.
    unused = all(f.seeds is not None for f in spec.families)
    seeds = spec.confirmatory_seeds_text() if unused else f"{spec.seeds.start}–{spec.seeds.stop - 1}"
    lines = [
        f"# Registration: {spec.name}",
        "",
        f"Generated from `{loaded.path.name}` (spec {loaded.hash}) by `gigpo-lab study register`; do not edit.",
        "",
        f"**Question.** {spec.question}",
        "",
        "## Settings and arms",
        "",
        "| setting | overrides |",
        "|---|---|",
        *(f"| {name} | `{' '.join(ovr)}` |" for name, ovr in spec.settings.items()),
        "",
        "| arm | overrides |",
        "|---|---|",
        *(f"| {name} | `{' '.join(ovr)}` |" for name, ovr in spec.arms.items()),
        "",
        f"Every run also gets `{' '.join(spec.overrides) or '(nothing)'}`.",
        "",
        "## Seeds, metric, δ, rule",
        "",
        f"- **Confirmatory seeds** {seeds}; **pilot seeds** "
        f"{spec.pilot_seeds.start}–{spec.pilot_seeds.stop - 1}, never pooled with them.",
        f"- **Primary metric** `{spec.metric}`; secondary, never confirmatory: "
        f"{', '.join(f'`{m}`' for m in spec.secondary) or 'none'}.",
        f"- **δ = {spec.delta}** in `{spec.metric}`'s units. {spec.delta_reason}",
        f"- **α = {spec.alpha}** family-wise, Holm within each family; a contrast without pairs counts at p = 1.",
        f"- **Verdict rule `{spec.verdict}`**, on each confirmatory family's registered metric: {rule}",
        f"- **Test**: paired sign-flip permutation test of the mean difference (exact up to 2^m <= resamples) and "
        f"the 95% percentile bootstrap; {spec.analysis.resamples} resamples; stream `{spec.analysis.stream}` "
        f"from seed {spec.analysis.seed} (gigpo_lab/analysis/engine.py).",
        "",
        "## Families",
        "",
    ]
    for family in spec.families:
        role = "confirmatory (verdicts)" if family.confirmatory else "reported (no verdicts)"
        seeds = family.seeds or spec.seeds
        lines += [f"### {family.name}: {role}, on `{spec.family_metric(family)}`, seeds {seeds.start}–{seeds.stop - 1}",
                  "", "| contrast | A | B |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {label} | {' + '.join(a)} | {' + '.join(b)} |" for label, _, a, b in family.expanded()]
        if family.delta is not None:
            lines += ["", f"**δ = {family.delta}** for this family's verdicts: {family.delta_reason}"]
        if family.must_be_equal:
            lines += ["", "Every pair must be equal: any difference is a bug, not a result."]
        lines += [""]
    if spec.same_runs:
        lines += ["## Reruns (a reproducibility check, not registered)", ""]
        lines += [f"- `{p.copy}` reruns `{p.original}`: each seed's two runs must agree on every metric"
                  + (f"; on {', '.join(p.reuse_on)} a seed the copy lacks takes the original's row (a recorded "
                     "deviation)" if p.reuse_on else "") for p in spec.same_runs]  # fmt: skip
        lines += [""]
    runs = sum(map(len, spec.grid().values()))
    lines += [
        "## Grid and budget",
        "",
        f"{runs} confirmatory runs in {len(spec.grid())} cells (`gigpo-lab study plan`).",
    ]
    if spec.budget.cpu_hours or spec.budget.disk_gb:
        lines += [f"Budget: {spec.budget.cpu_hours or '-'} CPU-hours, {spec.budget.disk_gb or '-'} GB."]
    lines += ["", "## Registration", "", *registration.summary(registration.load(loaded))]
    return "\n".join(lines).rstrip() + "\n"


def text_path(loaded: LoadedSpec) -> Path:
    return loaded.path.with_suffix(".md")


def write_text(loaded: LoadedSpec) -> Path:
    path = text_path(loaded)
    path.write_text(render(loaded))
    return path


def check_text(loaded: LoadedSpec) -> bool:
    """Whether ``<spec>.md`` is what the spec and its registration generate now."""
    path = text_path(loaded)
    return path.is_file() and path.read_text() == render(loaded)
