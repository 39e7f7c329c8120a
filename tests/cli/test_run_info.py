"""Bad input: each a clear one-sentence error before any rollout (docs/FAULTS.md, "Bad input").

Values go through ``train(cfg)`` (refused with the sentence before any MLflow run opens or any checkpoint
folder is made); the CLI cases run ``python -m gigpo_lab.cli train`` as a real process. Tests share one sqlite store
(creating one takes seconds), each with its own output folder. More cases live in ``test_train.py``
(``test_bad_values_fail_before_any_rollout``) and ``test_config.py`` (unknown options, misspelt schema
keys, a string for a float).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from mlflow.tracking import MlflowClient

from gigpo_lab.config_paths import compose_config
from gigpo_lab.train import train
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_store) -> str:
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    shutil.copyfile(empty_mlflow_store, path)
    return f"sqlite:///{path}"


def _overrides(store: str, out: Path, *extra: str) -> list[str]:
    return [*TINY, f"output_dir={out}", f"tracking.uri={store}", *extra]


def _runs(store: str) -> list:
    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("gigpo-lab")
    return [] if exp is None else client.search_runs([exp.experiment_id])


def _fails_before_any_rollout(store: str, out: Path, overrides: list[str], error, message: str) -> str:
    with pytest.raises(error, match=message) as err:
        train(compose_config(overrides))
    assert not (out / "checkpoints").exists(), "nothing may run"
    text = str(err.value)
    assert "\n" not in text.strip(), "one sentence"
    return text


BAD_VALUES = [
    # the estimator's own checks (its schema), run when validate_config builds it
    (
        "estimator.step_advantage_weight=nan",
        r"step_advantage_weight=nan is not allowed; set .* in \[0.0, inf\)",
    ),
    (
        "estimator.step_advantage_weight=inf",
        r"step_advantage_weight=inf is not allowed; set .* in \[0.0, inf\)",
    ),
    (
        "estimator.gamma=-0.1",
        r"estimator.gamma=-0.1 is not allowed; set estimator.gamma to .* in \[0.0, 1.0\]",
    ),
    ("estimator.gamma=nan", r"estimator.gamma=nan is not allowed; set estimator.gamma to .* in \[0.0, 1.0\]"),
    (
        "exploration.beta=-1",
        r"exploration.beta=-1.0 is not allowed; set exploration.beta to .* in \[0.0, inf\)",
    ),
    (
        "rollout.group_size=0",
        r"rollout.group_size=0 is not allowed; set rollout.group_size to an integer >= 2",
    ),
    ("env.max_turns=-3", r"env.max_turns=-3 is not allowed; set env.max_turns to an integer >= 1"),
    (
        "trainer.iterations=0",
        r"trainer.iterations=0 is not allowed; set trainer.iterations to an integer >= 1",
    ),
    ("trainer.checkpoint_every=0", r"trainer.checkpoint_every=0 is not allowed; set .* to an integer >= 1"),
    ("trainer.optimizer.lr=-1e-3", r"trainer.optimizer.lr=-0.001 must be a number >= 0"),
    (
        "rollout.max_env_error_rate=1.5",
        r"rollout.max_env_error_rate=1.5 is not allowed; set .* in \[0.0, 1.0\]",
    ),
    ("trainer.reward_clip=0", r"trainer.reward_clip=0.0 is not allowed; set .* in \(0.0, inf\), or null"),
    ("trainer.reward_clip=-1", r"trainer.reward_clip=-1.0 is not allowed; set .* in \(0.0, inf\)"),
]


def test_the_bootstrap_variant_at_gamma_one_is_one_sentence_before_any_rollout(store, tmp_path):
    """bootstrap_truncated is off by default (the paper's G_t); switched on with gamma = 1 it is refused."""
    out = tmp_path / "out"
    overrides = _overrides(store, out, "estimator.bootstrap_truncated=true", "estimator.gamma=1")
    message = r"bootstrap_truncated needs gamma < 1 .*infinite.*set estimator.gamma below 1 or estimator.bootstrap_truncated=false"
    _fails_before_any_rollout(store, out, overrides, ValueError, message)
    assert _runs(store) == [] and not out.exists()


@pytest.mark.parametrize(("override", "message"), BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_bad_value_is_one_sentence_before_any_rollout(override, message, store, tmp_path):
    text = _fails_before_any_rollout(
        store, tmp_path / "out", _overrides(store, tmp_path / "out", override), ValueError, message
    )
    assert text.startswith(override.split("=")[0]), "the message leads with the key"
    assert _runs(store) == [], "refused before any MLflow run opens"
    assert not (tmp_path / "out").exists(), "and before any output folder is made"


def test_missing_checkpoint_is_a_clear_error(store, tmp_path):
    ckpt = tmp_path / "nope.ckpt"
    overrides = _overrides(store, tmp_path / "out", f"ckpt_path={ckpt}")
    _fails_before_any_rollout(store, tmp_path / "out", overrides, FileNotFoundError, "does not exist")


def test_a_file_that_is_not_a_checkpoint_is_a_clear_error(store, tmp_path):
    ckpt = tmp_path / "junk.ckpt"
    ckpt.write_bytes(b"these are not the weights you are looking for")
    overrides = _overrides(store, tmp_path / "out", f"ckpt_path={ckpt}")
    _fails_before_any_rollout(store, tmp_path / "out", overrides, ValueError, "is not a readable checkpoint")


BAD_MODELS = [
    ("empty_folder", r"model.path='.*' is not a Hugging Face model folder"),
    (
        "config_not_json",
        r"model.path=.* could not be loaded as a model \(OSError: .*not a valid JSON file",
    ),
    (
        "no_weights",
        r"model.path=.* could not be loaded as a model \(OSError: .*no file named model.safetensors",
    ),
    ("tokenizer_without_eos", r"the tokenizer of model.path=.* has no eos token"),
]


@pytest.mark.parametrize(("setup", "message"), BAD_MODELS, ids=[m for m, _ in BAD_MODELS])
def test_a_model_path_that_is_not_a_usable_model_is_a_clear_error(setup, message, store, tmp_path):
    from tests.hf_tiny import build_tiny_hf_model

    folder = tmp_path / "model"
    folder.mkdir()
    if setup == "config_not_json":
        (folder / "config.json").write_text("this is not json")
    elif setup == "no_weights":
        build_tiny_hf_model(folder)
        for f in folder.glob("*.safetensors"):
            f.unlink()
    elif setup == "tokenizer_without_eos":
        from transformers import AutoTokenizer

        build_tiny_hf_model(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        tok.eos_token = None
        tok.pad_token = None
        tok.save_pretrained(folder)
    overrides = _overrides(store, tmp_path / "out", "model=hf", f"model.path={folder}")
    error = FileNotFoundError if setup == "empty_folder" else ValueError
    _fails_before_any_rollout(store, tmp_path / "out", overrides, error, message)


# ----------------------------------------------------------------------------- composition (Hydra), no run
COMPOSE_ERRORS = [
    ("trainer.iteratons=3", r"Could not override 'trainer.iteratons'"),  # unknown key: names it
    ("rollout.groups=two", r"rollout.groups=two"),  # the rollout schema types it as an int
    ("estimator.step_advantage_weight=heavy", r"step_advantage_weight"),  # a float in the schema
    ("env.max_turns=1.5", r"env.max_turns=1.5"),  # an int in the env schema
    ("trainer.iterations=abc", r"trainer.iterations=abc"),  # an int in the trainer schema
    ("estimator.mode=mean_std", r"expected one of \[mean_norm, mean_std_norm\]"),  # choices are enums
    ("loss.aggregation=mean", r"expected one of \[token-mean, seq-mean-token-mean, seq-mean-token-sum\]"),
    ("lightning.precision=bf16", r"expected one of \[32-true, .*bf16-mixed"),
    ("env=gym_discrete env.success_on=win", r"expected one of \[terminated_positive, terminated, never\]"),
]


@pytest.mark.parametrize(("override", "message"), COMPOSE_ERRORS, ids=[o for o, _ in COMPOSE_ERRORS])
def test_unknown_keys_and_wrong_types_fail_at_compose_time(override, message):
    with pytest.raises(ConfigCompositionException) as err:
        compose_config(override.split())
    assert re.search(message, f"{err.value}\n{err.value.__cause__}"), f"{err.value}\n{err.value.__cause__}"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "gigpo_lab.cli", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_unknown_key_names_it_and_a_close_match_and_exits_2(tmp_path):
    """Through ``python -m`` too (tests/cli/test_cli_errors.py has the console script's table of mistakes)."""
    done = _cli("trainer.iteratons=3", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(
        "gigpo-lab train: trainer.iteratons is not a key of trainer; did you mean trainer.iterations?"
    )
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()


def test_cli_unknown_option_lists_the_valid_ones_without_schemas_and_exits_2(tmp_path):
    done = _cli("estimator=gipgo", cwd=tmp_path)
    assert done.returncode == 2
    assert "estimator=gipgo is not an option; did you mean gigpo?" in done.stderr
    assert "options: gigpo, gigpo_step_index, graphgpo, grpo" in done.stderr and "_schema" not in done.stderr


def test_a_checkpoint_from_another_store_names_the_store_to_use(store, tmp_path, empty_mlflow_store):
    first = tmp_path / "first"
    shutil.copyfile(empty_mlflow_store, tmp_path / "other.db")
    train(compose_config(_overrides(f"sqlite:///{tmp_path / 'other.db'}", first)))
    overrides = _overrides(store, tmp_path / "out", f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}")
    _fails_before_any_rollout(
        store, tmp_path / "out", overrides, RuntimeError, r"is not in the store 'sqlite:///"
    )
