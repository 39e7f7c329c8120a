"""Security: checkpoints load as data only, and secrets never reach the MLflow store (docs/FAULTS.md).

The UI's loopback binding is tested in ``test_ui.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config
from gigpo_lab.tracking.mlflow_tracker import REDACTED, is_secret_key, redact_secrets
from gigpo_lab.train import train


class _Payload:
    """Unpickling this runs a shell command: what a malicious checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_with_a_pickled_object_is_refused_and_its_code_never_runs(tiny_overrides, tmp_path):
    train(compose_config(tiny_overrides))
    ckpt = tmp_path / "out" / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    marker = tmp_path / "payload_ran"
    state["callbacks"]["evil"] = _Payload(marker)  # a real checkpoint with one object planted in it
    evil = tmp_path / "evil.ckpt"
    torch.save(state, evil)
    with pytest.raises(ValueError, match=r"holds pickled objects .* so it is refused .*posix\.system"):
        train(compose_config([*tiny_overrides, f"ckpt_path={evil}", "trainer.iterations=3"]))
    assert not marker.exists()
    # the same checkpoint without the payload resumes (Lightning loads it with weights_only=True too)
    del state["callbacks"]["evil"]
    clean = tmp_path / "clean.ckpt"
    torch.save(state, clean)
    metrics = train(compose_config([*tiny_overrides, f"ckpt_path={clean}", "trainer.iterations=3"]))
    assert metrics["train/iteration"] == 2.0


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("tracking.api_token", True),
        ("hf_token", True),
        ("db.password", True),
        ("aws_secret_access_key", True),
        ("openai-api-key", True),
        ("auth", True),
        ("rollout.max_new_tokens", False),
        ("tokenizer", False),
        ("monkey", False),
        ("estimator.step_advantage_weight", False),
    ],
)
def test_secret_looking_keys(key, secret):
    assert is_secret_key(key) is secret


def test_redaction_keeps_the_shape():
    cfg = {"a": {"api_token": "x", "n": 1, "tokens": [1, 2]}, "password": None, "l": [{"secret": "y"}]}
    assert redact_secrets(cfg) == {
        "a": {"api_token": REDACTED, "n": 1, "tokens": [1, 2]},
        "password": None,
        "l": [{"secret": REDACTED}],
    }


def _all_artifacts(client: MlflowClient, run_id: str, dest: Path) -> list[Path]:
    root = Path(client.download_artifacts(run_id, "", str(dest)))
    return [p for p in root.rglob("*") if p.is_file()]


def test_secrets_in_env_vars_and_config_never_reach_the_store(tiny_overrides, tmp_path, monkeypatch):
    env_secret, cfg_secret, interp_secret = "envS3cr3t-41a7", "cfgS3cr3t-9c2e", "interpS3cr3t-77d0"
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", env_secret)  # MLflow's own credential variable
    monkeypatch.setenv("GIGPO_TEST_TOKEN", interp_secret)
    cfg = compose_config(
        [
            *tiny_overrides,
            f"+tracking.api_token={cfg_secret}",
            "+tracking.auth_header=${oc.env:GIGPO_TEST_TOKEN}",  # a secret pulled in by interpolation
        ]
    )
    train(cfg)
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("gigpo-lab").experiment_id])
    secrets = (env_secret, cfg_secret, interp_secret)
    visible = [*run.data.params.items(), *run.data.tags.items(), *run.data.metrics]
    assert not [item for item in visible if any(s in str(item) for s in secrets)]
    assert run.data.params["tracking.api_token"] == REDACTED
    assert run.data.params["tracking.auth_header"] == REDACTED
    files = _all_artifacts(client, run.info.run_id, tmp_path / "artifacts")
    names = {f.name for f in files}
    assert {"config.yaml", "last.ckpt", "iteration_00000.jsonl"} <= names  # config, checkpoint and samples
    for path in files:
        data = path.read_bytes()
        leaked = [s for s in secrets if s.encode() in data]
        assert not leaked, f"{path.name} holds {leaked}"
