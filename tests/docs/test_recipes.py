"""The recipes of docs/ARCHITECTURE.md, followed as written: a toy estimator, a native text env and a
recording rollout engine, each from the user's own package and config folder (`--config-dir`,
`hydra.searchpath`), each training one tiny iteration; the files come from the page's code blocks."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest
import torch

from gigpo_lab.algorithm import compute_advantages, registry
from gigpo_lab.config_paths import config_root
from gigpo_lab.envs import make_env
from tests import doc_blocks

DOC = config_root() / "docs" / "ARCHITECTURE.md"
TEXT = DOC.read_text()


def _files() -> dict[str, str]:
    return {b.file: b.text for b in doc_blocks.blocks(TEXT) if b.file}


def test_recipes_train_one_tiny_iteration_each(tmp_path):
    steps = doc_blocks.plan(TEXT, "ARCHITECTURE.md", slow=False)
    runs = [" ".join(s.argv) for s in steps if s.argv]
    for needle in ("estimator=toy", "hydra.searchpath=", "env=rooms", "rollout=recording"):
        assert any(needle in r for r in runs), f"no recipe command with {needle!r}"
    out = doc_blocks.run_fast(steps, tmp_path)
    assert out.returncode == 0, out.stderr[-8000:]
    assert (tmp_path / "generations.jsonl").read_text().count("\n") >= 1  # one line per iteration


@pytest.mark.slow
def test_recipes_as_a_user_types_them(tmp_path):
    doc_blocks.run_shell(doc_blocks.plan(TEXT, "ARCHITECTURE.md", slow=True), tmp_path)


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """The recipe's files in tmp_path, importable; the estimator registry and gym registry restored after."""
    for name, text in _files().items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield tmp_path
    for mod in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[mod]
    gym.registry.pop("gigpo_lab/Rooms-v0", None)


def test_toy_estimator_is_registered_and_computes_what_its_docstring_says(user_package):
    import my_lab.toy  # noqa: F401  (registers "toy")

    rewards = torch.tensor([0.0, 0.0, 10.0, 0.0, 0.0, 10.0], dtype=torch.float64)
    cols = {
        "rewards": rewards,
        "group_ids": torch.zeros(6, dtype=torch.int64),
        "traj_ids": torch.tensor([0, 0, 0, 1, 2, 2]),
    }
    returns = torch.tensor([10.0, 10.0, 10.0, 0.0, 10.0, 10.0], dtype=torch.float64)
    got = compute_advantages("toy", **cols, scale=2.0)
    torch.testing.assert_close(got, 2.0 * (returns - returns.mean()))
    with pytest.raises(ValueError, match="already registered"):
        registry.register_estimator("toy")(my_lab.toy.Toy)


def test_rooms_env_is_made_by_make_env_and_reports_anchors(user_package):
    env = make_env("my_lab.rooms:gigpo_lab/Rooms-v0", max_turns=8, name="rooms")
    obs, info = env.reset(seed=0)
    assert info["anchor"] == "hall" and "hall" in obs
    from gigpo_lab.envs.base import tokenize

    vocabulary = set(env.unwrapped.vocabulary())
    total = 0.0
    for text in ("<action>east</action>", "<action>dance</action>", "east", "take"):
        obs, reward, terminated, truncated, info = env.step(text)
        assert set(tokenize(obs)) <= vocabulary and set(tokenize(info["anchor"])) <= vocabulary
        total += reward
    assert info["success"] and terminated and total == 10.0
