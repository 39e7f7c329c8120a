"""docs/ARCHITECTURE.md, "Adding an env (inside the lab)", followed literally: its two blocks (the module for
``gigpo_lab/envs/`` and the option for ``conf/env/``) are written to a scratch folder that joins the package's
``__path__`` and Hydra's search path; no other file is edited. The env is then made by its option, typed at
compose time, and trains one iteration in a real Lightning run."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

import gigpo_lab.envs as envs_package
from gigpo_lab.config_paths import compose_config, config_root
from tests import doc_blocks

DOC = config_root() / "docs" / "ARCHITECTURE.md"
HEADING = "### Adding an env (inside the lab)"
NAME = "corridor"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """The lab with the recipe's two files added (in tmp_path); the registries restored afterwards."""
    written = doc_blocks.add_lab_files(DOC.read_text(), HEADING, tmp_path)
    assert written == [f"conf/env/{NAME}.yaml", f"gigpo_lab/envs/{NAME}.py"]
    monkeypatch.setattr(
        envs_package, "__path__", [*envs_package.__path__, str(tmp_path / "gigpo_lab" / "envs")]
    )
    yield doc_blocks.lab_search_path(tmp_path)
    sys.modules.pop(f"gigpo_lab.envs.{NAME}", None)
    gym.registry.pop("gigpo_lab/Corridor-v0", None)
    ConfigStore.instance().repo["schema"]["env"].pop(f"{NAME}.yaml", None)


def test_the_new_env_is_made_by_its_option_and_typed(lab):
    with pytest.raises(ConfigCompositionException, match="length"):
        compose_config([lab, f"env={NAME}", "env.length=long"])
    env = instantiate(compose_config([lab, f"env={NAME}", "env.length=4"]).env)
    obs, info = env.reset(seed=0)
    assert info["anchor"] == "start" and "start" in obs
    total = 0.0
    for text in ("<action>right</action>", "<action>jump</action>", "right", "right"):
        obs, reward, terminated, truncated, info = env.step(text)
        total += reward
    assert info["success"] and terminated and total == 1.0


def test_the_new_env_trains_one_iteration(lab, tiny_overrides):
    from gigpo_lab.train import train

    cfg = compose_config([*tiny_overrides, lab, "trainer.iterations=1", f"env={NAME}"])
    metrics = train(cfg)
    assert metrics["train/steps_taken"] >= 1
