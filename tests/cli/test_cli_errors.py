"""Command-line mistakes: each one line (or two) that names the key, exit status 2, nothing written.

Every case runs ``gigpo-lab train`` as a real process through the console script, in an empty working
directory whose default MLflow store (``./mlflow.db``) must still not exist afterwards: no run, no store, no
checkpoint. Messages whose tail lists a schema's keys are compared up to that list (the schemas may grow).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
P = "gigpo-lab train: "

#: (kind of mistake, overrides, the exact message; a message ending in "(" is compared up to there)
MISTAKES = [
    (
        "typo'd option",
        ["estimator=gipo"],
        P + "estimator=gipo is not an option; did you mean gigpo? "
        "(options: gigpo, gigpo_step_index, graphgpo, grpo, hgpo, ppo, reinforce_pp, rloo)",
    ),
    (
        "typo'd launcher",
        ["hydra/launcher=slrm"],
        P + "hydra/launcher=slrm is not an option; did you mean slurm? "
        "(options: basic, joblib, local, slurm, submitit_local, submitit_slurm)",
    ),
    (
        "typo'd key",
        ["estimator.step_advantage_wieght=0.5"],
        P + "estimator.step_advantage_wieght is not a key of estimator; "
        "did you mean estimator.step_advantage_weight? (",
    ),
    (
        "typo'd key, no schema",
        ["trainer.iteratons=3"],
        P + "trainer.iteratons is not a key of trainer; did you mean trainer.iterations? (",
    ),
    ("moved key", ["trainer.devices=2"], P + "trainer.devices moved to lightning.devices"),
    ("moved key", ["trainer.num_threads=1"], P + "trainer.num_threads moved to lightning.num_threads"),
    ("moved option", ["trainer=ddp"], P + "trainer=ddp moved to lightning=ddp"),
    ("moved key", ["estimator.kl_in_reward=true"], P + "estimator.kl_in_reward moved to loss.kl_in_reward"),
    (
        "wrong type",
        ["rollout.groups=two"],
        P + "rollout.groups=two: Value 'two' of type 'str' could not be converted to Integer",
    ),
    (
        "out-of-range value",
        ["estimator.step_advantage_weight=-0.5"],
        P
        + "estimator.step_advantage_weight=-0.5 is not allowed; set estimator.step_advantage_weight to a real "
        "number in [0.0, inf)",
    ),
    (
        "missing required value",
        ["model=hf"],
        P + "model.path is required with model=hf and has no default; add model.path=<value> to the command",
    ),
    (
        "missing model folder",
        ["model=hf", "model.path=/no/such/model"],
        P + "model.path=/no/such/model: no such folder; point it at a Hugging Face model folder "
        "(config.json, weights and tokenizer files)",
    ),
    (
        "incompatible combination",
        ["lightning.strategy=ddp_spawn", "lightning.accelerator=cpu"],
        P + "lightning.strategy=ddp_spawn runs the iterations in worker processes, whose final state this "
        "process cannot save or report; use lightning=ddp (Lightning relaunches the command once per device)",
    ),
    (
        "value out of its bound",
        ["rollout.group_size=1"],
        P + "rollout.group_size=1 is not allowed; set rollout.group_size to an integer >= 2",
    ),
    (
        "override syntax",
        ["trainer.iterations=[1"],
        P + "no viable alternative at input '[1'\n"
        "  See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details",
    ),
]


def _train(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}
    environ.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [str(BIN / "gigpo-lab"), "train", *args],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(("kind", "args", "message"), MISTAKES, ids=[" ".join(m[1]) for m in MISTAKES])
def test_a_mistake_is_one_line_exit_2_and_writes_nothing(kind, args, message, tmp_path):
    done = _train(args, tmp_path)
    assert done.returncode == 2, f"{kind}: exit {done.returncode}\n{done.stderr[-3000:]}"
    text = done.stderr.strip()
    if message.endswith("("):
        assert text.startswith(message), f"{kind}:\n{text}"
        assert text.count("\n") == 0
    else:
        assert text == message, f"{kind}:\n{text}"
    assert "Traceback" not in done.stderr and "_schema" not in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "mlflow.db").exists(), "no MLflow store, so no run"
    assert not list(tmp_path.rglob("checkpoints")), "nothing trained"


def test_verbose_or_hydra_full_error_bring_the_traceback_back(tmp_path):
    verbose = _train(["rollout.group_size=1", "verbose=true"], tmp_path)
    full = _train(["rollout.group_size=1"], tmp_path, HYDRA_FULL_ERROR="1")
    for done in (verbose, full):
        assert done.returncode != 0 and "Traceback" in done.stderr
        assert "ConfigError: rollout.group_size=1" in done.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_a_config_file_that_sets_a_moved_key_names_the_new_spelling():
    """An experiment or sweep file written before the lightning group: Hydra names only the file and the key's
    last part; the message names the old and the new spelling."""
    from hydra.errors import ConfigCompositionException

    from gigpo_lab.cli.errors import explain

    err = ConfigCompositionException(
        "In 'experiments/old': ConfigKeyError raised while composing config:\nKey 'num_threads' not in "
        "'TrainerConfig'"
    )
    assert explain(err) == (2, P + "in experiments/old: trainer.num_threads moved to lightning.num_threads")
