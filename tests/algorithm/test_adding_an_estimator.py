"""docs/ARCHITECTURE.md, "Adding an estimator (inside the lab)", followed literally: its two blocks (the module
for ``gigpo_lab/algorithm/`` and the option for ``conf/estimator/``) are written to a scratch folder that
joins the package's ``__path__`` and Hydra's search path; no other file is edited. The new estimator is then
listed, typed at compose time, computed by name, and trains one iteration in a real Lightning run."""

from __future__ import annotations

import sys

import pytest
import torch
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException

import gigpo_lab.algorithm as advantages_package
from gigpo_lab import config_paths
from gigpo_lab.algorithm import available_estimators, compute_advantages, registry
from gigpo_lab.config_paths import compose_config, config_root
from tests import doc_blocks

DOC = config_root() / "docs" / "ARCHITECTURE.md"
HEADING = "### Adding an estimator (inside the lab)"
NAME = "centred_return"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """The lab with the recipe's two files added (in tmp_path); the registries restored afterwards."""
    written = doc_blocks.add_lab_files(DOC.read_text(), HEADING, tmp_path)
    assert written == [f"conf/estimator/{NAME}.yaml", f"gigpo_lab/algorithm/{NAME}.py"]
    extra = str(tmp_path / "gigpo_lab" / "algorithm")
    monkeypatch.setattr(advantages_package, "__path__", [*advantages_package.__path__, extra])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield doc_blocks.lab_search_path(tmp_path)
    sys.modules.pop(f"gigpo_lab.algorithm.{NAME}", None)
    store = ConfigStore.instance().repo
    store["schema"]["estimator"].pop(f"{NAME}.yaml", None)
    store["estimator"].pop(
        f"{NAME}.yaml", None
    )  # stored as an option too (register_schemas): a later test in
    config_paths._STORED.clear()  # this worker must not list it, so the next compose stores the schemas again


def test_the_new_estimator_is_listed_typed_and_computed_by_name(lab):
    assert NAME in available_estimators()
    with pytest.raises(ConfigCompositionException, match="scale"):
        compose_config([lab, f"estimator={NAME}", "estimator.scale=big"])
    assert compose_config([lab, f"estimator={NAME}"]).estimator.scale == 1.0
    rewards = torch.tensor([0.0, 10.0, 0.0, 0.0, 4.0, 2.0], dtype=torch.float64)
    cols = {
        "rewards": rewards,
        "group_ids": torch.tensor([0, 0, 0, 1, 1, 1]),
        "traj_ids": torch.tensor([0, 0, 1, 2, 3, 3]),
    }
    # returns by trajectory: 10, 0 (group 0, mean 5); 0, 6 (group 1, mean 3)
    expected = 2.0 * torch.tensor([5.0, 5.0, -5.0, -3.0, 3.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(compute_advantages(NAME, **cols, scale=2.0), expected)


def test_the_new_estimator_trains_one_iteration(lab, tiny_overrides):
    from gigpo_lab.train import train

    cfg = compose_config(
        [*tiny_overrides, lab, "trainer.iterations=1", f"estimator={NAME}", "estimator.scale=2.0"]
    )
    metrics = train(cfg)
    assert metrics["adv/centred_scale"] == 2.0
    assert metrics["train/steps_taken"] >= 1
