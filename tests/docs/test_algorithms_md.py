"""docs/ALGORITHMS.md cannot drift: its worked batch and every result table are parsed from the Markdown
and recomputed with ``compute_advantages`` (to 1e-4), with the defaults the doc says it uses.

Markers in the Markdown: ``<!-- worked-batch -->`` before the ```text block of the batch (rows
``traj_id``, ``step_id``, ``anchor``, ``reward``, ``invalid``), and ``<!-- worked: NAME key=value ... -->``
before each table (rows = trajectories, columns = steps). NAME is a registered estimator, or
``step_level`` (gigpo minus grpo, i.e. ω·A^S with ω = 1) or ``step_returns`` (G_t - p_i). ``<!-- worked-values
-->`` before a ```text block with one row ``value`` gives the batch the critic's values that ppo reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from gigpo_lab.algorithm import available_estimators, compute_advantages
from gigpo_lab.config_paths import config_root

DOC = config_root() / "docs" / "ALGORITHMS.md"
MARKER = re.compile(r"<!-- worked: (\S+)(.*?)-->")


def _batch(text: str) -> dict[str, list[str]]:
    block = text.split("<!-- worked-batch -->", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    return {line.split()[0]: line.split()[1:] for line in block.strip().splitlines()}


def _tables(text: str) -> list[tuple[str, dict, dict[tuple[str, int], float]]]:
    out = []
    for m in MARKER.finditer(text):
        params = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in m.group(2).split())}
        lines = text[m.end() :].strip().splitlines()
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        steps = [int(h.split()[1]) for h in header[1:]]
        values = {}
        for line in lines[2:]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for step, cell in zip(steps, cells[1:], strict=True):
                if cell:
                    values[(cells[0], step)] = float(cell.replace("−", "-"))
        out.append((m.group(1), params, values))
    return out


def _values(text: str) -> list[float]:
    block = text.split("<!-- worked-values -->", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    (line,) = block.strip().splitlines()
    assert line.split()[0] == "value"
    return [float(v) for v in line.split()[1:]]


TEXT = DOC.read_text()
BATCH = _batch(TEXT)
VALUES = _values(TEXT)
TABLES = _tables(TEXT)


def _columns(batch: dict[str, list[str]], anchors=None) -> dict[str, torch.Tensor]:
    trajs = sorted(set(batch["traj_id"]))
    names = sorted(set(batch["anchor"]))
    anchor_ids = [names.index(a) for a in batch["anchor"]] if anchors is None else anchors
    return {
        "rewards": torch.tensor([float(r) for r in batch["reward"]], dtype=torch.float64),
        "group_ids": torch.zeros(len(batch["reward"]), dtype=torch.int64),
        "traj_ids": torch.tensor([trajs.index(t) for t in batch["traj_id"]]),
        "step_ids": torch.tensor([int(s) for s in batch["step_id"]]),
        "anchor_ids": torch.tensor(anchor_ids),
        "invalid": torch.tensor([flag == "T" for flag in batch["invalid"]]),
        "values": torch.tensor(VALUES, dtype=torch.float64),
    }


def _compute(name: str, params: dict) -> torch.Tensor:
    cols = _columns(BATCH)
    if name == "step_level":  # gigpo - grpo = omega * A^S, omega = 1
        return compute_advantages("gigpo", **cols, **params) - compute_advantages("grpo", **cols, **params)
    if name == "step_returns":  # every anchor distinct, raw singletons: gigpo - grpo = G_t - p_i
        distinct = _columns(BATCH, anchors=list(range(len(BATCH["reward"]))))
        return compute_advantages("gigpo", **distinct, step_singleton="raw") - compute_advantages(
            "grpo", **cols
        )
    return compute_advantages(name, **cols, **params)


def test_the_doc_shows_the_batch_of_the_layout_section_and_a_table_per_estimator():
    assert len(set(map(len, BATCH.values()))) == 1 and len(BATCH["reward"]) == 9
    layout = TEXT.split("```text\n", 1)[1].split("```", 1)[0]  # section 1's drawing
    for key, values in BATCH.items():
        assert re.search(rf"^{key}\s+" + r"\s+".join(map(re.escape, values)) + r"\s", layout, re.M), key
    names = {name for name, _, _ in TABLES}
    assert set(available_estimators()) <= names, (
        f"estimators without a worked table: {set(available_estimators()) - names}"
    )


@pytest.mark.parametrize(("name", "params", "values"), TABLES, ids=[f"{n}{p or ''}" for n, p, _ in TABLES])
def test_worked_table_matches_compute_advantages(name, params, values):
    got = _compute(name, params)
    rows = list(zip(BATCH["traj_id"], (int(s) for s in BATCH["step_id"]), strict=True))
    assert set(values) == set(rows), f"the table's cells {sorted(values)} are not the batch's rows {rows}"
    for i, row in enumerate(rows):
        assert abs(float(got[i]) - values[row]) < 1e-4, (
            f"{name} {params} at {row}: doc {values[row]}, code {float(got[i]):.6f}"
        )


def test_papers_are_cited():
    for ref in (
        "2505.10978",
        "2402.03300",
        "2402.14740",
        "2501.03262",
        "1707.06347",
        "1506.02438",
        "joschu.net/blog/kl-approx.html",
        "7364",
    ):
        assert ref in TEXT, ref


def test_every_estimator_option_is_explained():
    from gigpo_lab.algorithm import estimator_params

    options = {p for name in available_estimators() for p in estimator_params(name)}
    table = TEXT.split("## 11. The options at a glance", 1)[1].split("\n## ", 1)[0]
    missing = sorted(p for p in options if f"`{p}`" not in table)
    assert not missing, f"options missing from the table of section 11: {missing}"


def test_links_to_other_docs_exist():
    for target in re.findall(r"\]\(([A-Z]+\.md)", TEXT):
        assert (Path(DOC).parent / target).is_file(), target


@pytest.mark.parametrize("name", available_estimators())
def test_the_trainer_the_functional_api_and_the_doc_agree_at_the_defaults(name):
    """Published semantics at the defaults (issue #31): the estimator the composed config builds (what the
    trainer runs), ``compute_advantages(name, ...)`` with no parameters, and the doc's table for ``name`` with
    no parameters (the defaults) give the same advantages on the worked batch: bit for bit between the first
    two, to the doc's four places for the third."""
    from hydra.utils import instantiate

    from gigpo_lab.batch import StepBatch
    from gigpo_lab.config_paths import compose_config

    cols = _columns(BATCH)
    trainer = instantiate(compose_config([f"estimator={name}"]).estimator)(StepBatch(**cols)).advantages
    functional = compute_advantages(name, **cols)
    assert torch.equal(trainer, functional)
    (values,) = [v for n, p, v in TABLES if n == name and not p]
    rows = list(zip(BATCH["traj_id"], (int(s) for s in BATCH["step_id"]), strict=True))
    assert all(abs(values[r] - float(x)) < 6e-5 for r, x in zip(rows, functional, strict=True))
