"""conf/model/*.yaml and conf/rollout/*.yaml, composed through a throwaway primary config."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_tiny import build_tiny_hf_model
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue

from gigpo_lab.config_paths import register_schemas
from gigpo_lab.policy import HFPolicy, TinyPolicy
from gigpo_lab.rollout import TorchEngine

CONF = Path(__file__).resolve().parents[2] / "conf"
VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down"]


def compose_groups(tmp_path: Path, model: str, overrides=(), extra: str = ""):
    """Compose ``model`` and ``rollout: torch`` from conf/ under a primary config written to tmp_path."""
    register_schemas()
    (tmp_path / "primary.yaml").write_text(
        f"defaults:\n  - model: {model}\n  - rollout: torch\n  - _self_\nseed: 5\n{extra}"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        return compose("primary", overrides=[f"hydra.searchpath=[file://{CONF}]", *overrides])


def test_tiny_model_and_torch_rollout_instantiate(tmp_path):
    cfg = compose_groups(tmp_path, "tiny", ["rollout.temperature=0.5", "model.d_model=32"])
    policy = instantiate(cfg.model)(vocabulary=VOCAB)
    engine = instantiate(cfg.rollout.engine)(policy=policy)
    assert isinstance(policy, TinyPolicy) and isinstance(engine, TorchEngine) and engine.policy is policy
    assert engine.sampling.temperature == 0.5 and engine.sampling.max_new_tokens == 1
    assert cfg.model.seed == 5, "the tiny model's init seed follows the run seed"
    assert (cfg.rollout.groups, cfg.rollout.group_size, cfg.rollout.eval_greedy) == (8, 8, False)


def test_hf_model_needs_a_path_and_instantiates_with_one(tmp_path):
    cfg = compose_groups(tmp_path, "hf")
    with pytest.raises(MissingMandatoryValue):
        OmegaConf.to_container(cfg.model, throw_on_missing=True)
    path = build_tiny_hf_model(tmp_path / "m")
    cfg = compose_groups(tmp_path, "hf", [f"model.path={path}", "rollout.max_new_tokens=5"])
    policy = instantiate(cfg.model)(vocabulary=VOCAB)
    engine = instantiate(cfg.rollout.engine)(policy=policy)
    assert isinstance(policy, HFPolicy) and engine.sampling.max_new_tokens == 5


@pytest.mark.parametrize("typo", ["rollout:\n  temprature: 0.5\n", "rollout:\n  engine:\n    top_k: 5\n"])
def test_rollout_typos_fail_at_compose_time(tmp_path, typo):
    """A misspelt rollout key in a config file (as an experiment file would write it) is refused."""
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="temprature|top_k"):
        compose_groups(tmp_path, "tiny", extra=typo)
