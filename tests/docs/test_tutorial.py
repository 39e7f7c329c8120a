"""docs/TUTORIAL.md, top to bottom: every command of every ```bash block runs, in order, in one scratch
folder, with the tiny-size overrides the page's `<!-- test: ... -->` comments ask for (tests/doc_blocks.py).

The default test runs the gigpo-lab commands in-process in one child Python (about 40 s) and skips the
blocks marked slow (the MLflow UI); the slow test runs every command through bash, as a user would.
"""

from __future__ import annotations

import pytest

from gigpo_lab.config_paths import config_root
from tests import doc_blocks

DOC = config_root() / "docs" / "TUTORIAL.md"


def test_the_tutorial_has_the_promised_steps():
    text = DOC.read_text()
    steps = doc_blocks.plan(text, "TUTORIAL.md", slow=True)
    argvs = [" ".join(s.argv) for s in steps if s.argv]
    for needle in (
        "gigpo-lab train",
        "estimator=grpo",
        "-m sweeps=step_weight",
        "gigpo-lab compare",
        "gigpo-lab ui",
        "env=gym_discrete",
        "rollout=vllm",
    ):
        assert any(needle in a for a in argvs), f"no command with {needle!r}"
    assert any(s.write and s.write[0] == "my_corridor.py" for s in steps)
    assert all(s.argv[:1] == ["gigpo-lab"] for s in steps if s.argv), "a command the fast runner cannot run"


def test_tutorial_fast(tmp_path):
    steps = doc_blocks.plan(DOC.read_text(), "TUTORIAL.md", slow=False)
    out = doc_blocks.run_fast(steps, tmp_path)
    assert out.returncode == 0, out.stderr[-8000:]


@pytest.mark.slow
def test_tutorial_as_a_user_types_it(tmp_path):
    doc_blocks.run_shell(doc_blocks.plan(DOC.read_text(), "TUTORIAL.md", slow=True), tmp_path)
