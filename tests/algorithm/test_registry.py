"""The registry, declared column requirements, and every input error's message."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gigpo_lab.algorithm import (
    GRPO,
    Estimator,
    GiGPO,
    MissingColumnError,
    available_estimators,
    build_estimator,
    check_requirements,
    compute_advantages,
    estimator_params,
    get_estimator_class,
    register_estimator,
)
from gigpo_lab.algorithm import registry as registry_module

NAMES = ["gigpo", "gigpo_step_index", "graphgpo", "grpo", "hgpo", "ppo", "reinforce_pp", "rloo"]


def cols(n_rows=6, **changes):
    """Two groups of trajectories with 1-2 steps; ``changes`` replaces or drops (None) columns."""
    base = {
        "rewards": torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])[:n_rows],
        "group_ids": torch.tensor([7, 7, 7, 9, 9, 9])[:n_rows],
        "traj_ids": torch.tensor([1, 1, 2, 3, 3, 4])[:n_rows],
        "step_ids": torch.tensor([0, 1, 0, 0, 1, 0])[:n_rows],
        "anchor_ids": torch.tensor([5, 6, 5, 5, 6, 5])[:n_rows],
        "invalid": torch.tensor([False, True, False, False, False, False])[:n_rows],
        "anchor_texts": ["a", "b", "a", "a", "b", "a"][:n_rows],
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


# --- registry ---------------------------------------------------------------------------------------------


def test_the_five_estimators_are_registered_with_their_classes():
    assert available_estimators() == tuple(NAMES)
    assert get_estimator_class("gigpo") is GiGPO and get_estimator_class("grpo") is GRPO
    for name in NAMES:
        est = build_estimator(name)
        assert est.name == name and type(est) is get_estimator_class(name)


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown estimator 'gipgo'") as err:
        build_estimator("gipgo")
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="valid names"):
        compute_advantages("ppo_typo", **cols())


def test_duplicate_registration_is_refused():
    class Probe(Estimator):
        def compute(self, rows):
            return rows.rewards, {}

    try:
        register_estimator("_probe_estimator")(Probe)
        with pytest.raises(ValueError, match="already registered by .*Probe"):
            register_estimator("_probe_estimator")(Probe)
        with pytest.raises(ValueError, match="'gigpo' is already registered"):
            register_estimator("gigpo")(Probe)
        assert compute_advantages("_probe_estimator", **cols()).tolist() == cols()["rewards"].tolist()
    finally:
        registry_module._REGISTRY.pop("_probe_estimator", None)
    assert get_estimator_class("gigpo") is GiGPO


def test_only_estimator_classes_can_register():
    with pytest.raises(TypeError, match="Estimator subclasses"):
        register_estimator("_not_an_estimator")(dict)


def test_unknown_param_lists_the_valid_params():
    with pytest.raises(TypeError, match="unknown parameter.*'step_weight'") as err:
        compute_advantages("gigpo", **cols(), step_weight=0.5)
    for p in estimator_params("gigpo"):
        assert p in str(err.value)
    assert "step_advantage_weight" in estimator_params("gigpo")


# --- declared requirements --------------------------------------------------------------------------------


def test_declared_requirements():
    assert build_estimator("grpo").requires == ("rewards", "group_ids", "traj_ids")
    assert build_estimator("gigpo").requires == ("rewards", "group_ids", "traj_ids", "step_ids", "anchor_ids")
    similar = build_estimator("gigpo", anchor_similarity_threshold=0.9)
    assert similar.requires == ("rewards", "group_ids", "traj_ids", "step_ids", "anchor_texts")
    assert "step_ids" in build_estimator("gigpo_step_index").requires


def test_missing_column_names_estimator_column_and_provider():
    with pytest.raises(MissingColumnError) as err:
        compute_advantages("gigpo", **cols(anchor_ids=None))
    msg = str(err.value)
    assert "'gigpo'" in msg and "'anchor_ids'" in msg and "info['anchor']" in msg
    with pytest.raises(MissingColumnError, match="anchor_texts"):
        compute_advantages("gigpo", **cols(anchor_texts=None), anchor_similarity_threshold=0.8)
    with pytest.raises(MissingColumnError, match="'step_ids'.*turn counter"):
        compute_advantages("gigpo_step_index", **cols(step_ids=None))


def test_columns_not_needed_may_be_absent():
    grpo = compute_advantages("grpo", **cols(step_ids=None, anchor_ids=None, anchor_texts=None))
    no_invalid = compute_advantages("grpo", **cols(invalid=None))
    all_valid = compute_advantages("grpo", **cols(invalid=torch.zeros(6, dtype=torch.bool)))
    assert grpo.shape == (6,) and torch.equal(no_invalid, all_valid)  # absent invalid = no invalid rows


def test_check_requirements_without_data():
    full = ["rewards", "group_ids", "traj_ids", "step_ids", "anchor_ids", "invalid"]
    check_requirements("gigpo", full)
    check_requirements(build_estimator("grpo"), ["rewards", "group_ids", "traj_ids"])
    with pytest.raises(MissingColumnError, match="'gigpo'.*'anchor_ids'"):
        check_requirements("gigpo", ["rewards", "group_ids", "traj_ids", "step_ids"])
    with pytest.raises(MissingColumnError, match="anchor_texts"):
        check_requirements("gigpo", full, anchor_similarity_threshold=0.9)
    with pytest.raises(TypeError, match="only with an estimator name"):
        check_requirements(build_estimator("gigpo"), full, gamma=0.5)


# --- bad input --------------------------------------------------------------------------------------------


def test_mismatched_lengths_name_the_columns_and_lengths():
    with pytest.raises(ValueError, match="same length") as err:
        compute_advantages("gigpo", **cols(traj_ids=torch.tensor([1, 1, 2, 3, 3])))
    assert "rewards has 6" in str(err.value) and "traj_ids has 5" in str(err.value)
    with pytest.raises(ValueError, match="anchor_texts has 2"):
        compute_advantages("gigpo", **cols(anchor_texts=["a", "b"]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_name_the_first_bad_row(bad):
    rewards = torch.tensor([0.0, 1.0, 2.0, bad, 4.0, bad])
    with pytest.raises(ValueError, match=r"rewards must be finite; row 3 has reward"):
        compute_advantages("grpo", **cols(rewards=rewards))


@pytest.mark.parametrize("threshold", [0.0, 1.0, 1.5, -0.1, float("nan")])
def test_similarity_threshold_must_be_inside_0_1(threshold):
    with pytest.raises(ValueError, match=r"anchor_similarity_threshold=.* is outside \(0.0, 1.0\)"):
        compute_advantages("gigpo", **cols(), anchor_similarity_threshold=threshold)


@pytest.mark.parametrize(
    ("name", "param", "value", "pattern"),
    [
        ("gigpo", "step_advantage_weight", -0.1, r"step_advantage_weight=-0.1 is outside \[0.0, inf\)"),
        ("gigpo", "step_advantage_weight", float("nan"), "step_advantage_weight=nan is outside"),
        ("gigpo", "gamma", 1.5, r"gamma=1.5 is outside \[0.0, 1.0\]"),
        ("gigpo", "gamma", -0.01, "gamma=-0.01 is outside"),
        (
            "gigpo",
            "mode",
            "mean_std",
            r"mode='mean_std' is not valid; expected one of \['mean_norm', 'mean_std_norm'\]",
        ),
        ("grpo", "normalize_over", "steps", r"expected one of \['rows', 'trajectories'\]"),
        ("gigpo", "step_singleton", "mean", r"expected one of \['raw', 'zero'\]"),
        ("grpo", "epsilon", 0.0, r"epsilon=0.0 is outside \(0.0, inf\)"),
        ("rloo", "invalid_action_penalty", -1.0, "invalid_action_penalty=-1.0 is outside"),
        ("gigpo_step_index", "step_advantage_weight", -2, "step_advantage_weight=-2 is outside"),
    ],
)
def test_bad_params_say_what_is_allowed(name, param, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_estimator(name, **{param: value})


@pytest.mark.parametrize(("param", "value"), [("scale_by_std", 1), ("gamma", "0.9")])
def test_wrongly_typed_params_are_refused(param, value):
    name = "gigpo_step_index" if param == "scale_by_std" else "gigpo"
    with pytest.raises(TypeError, match=param):
        build_estimator(name, **{param: value})


@pytest.mark.parametrize(
    ("steps", "shown"),
    [([0, 2, 0, 0, 1, 0], "[0, 2]"), ([1, 2, 0, 0, 1, 0], "[1, 2]"), ([0, 0, 0, 0, 1, 0], "[0, 0]")],
)
def test_steps_must_be_contiguous_from_zero(steps, shown):
    with pytest.raises(ValueError, match=r"step_ids must be 0..T-1") as err:
        compute_advantages("gigpo", **cols(step_ids=torch.tensor(steps)))
    assert f"traj_id=1 has 2 rows with step_ids {shown}" in str(err.value)


def test_a_repeated_step_within_the_range_is_caught():
    """Trajectory 1 has steps 0, 1, 1: every step is in [0, T) but step 2 is missing."""
    c = cols(traj_ids=torch.tensor([1, 1, 1, 4, 4, 5]), step_ids=torch.tensor([0, 1, 1, 0, 1, 0]))
    with pytest.raises(ValueError, match=r"traj_id=1 has 3 rows with step_ids \[0, 1, 1\]"):
        compute_advantages("gigpo", **c)


def test_a_trajectory_in_two_groups_is_refused():
    with pytest.raises(ValueError, match=r"traj_id=2 appears in groups \[7, 9\]"):
        compute_advantages("grpo", **cols(traj_ids=torch.tensor([1, 1, 2, 2, 3, 4])))


def test_dtype_and_shape_errors():
    with pytest.raises(TypeError, match="rewards must be a float tensor"):
        compute_advantages("grpo", **cols(rewards=torch.arange(6)))
    with pytest.raises(TypeError, match="group_ids must be an integer tensor"):
        compute_advantages("grpo", **cols(group_ids=torch.zeros(6)))
    with pytest.raises(ValueError, match=r"must be 1-D of shape \(N,\), got shape \(6, 1\)"):
        compute_advantages("grpo", **cols(rewards=torch.zeros(6, 1)))
    with pytest.raises(ValueError, match="invalid must be bool or 0/1"):
        compute_advantages("grpo", **cols(invalid=torch.tensor([0, 2, 0, 0, 0, 0])))
    with pytest.raises(ValueError, match="empty"):
        compute_advantages("grpo", **{k: v[:0] for k, v in cols().items()})


def test_importing_the_package_stays_light():
    code = "import sys, gigpo_lab.algorithm; print(any(m.split('.')[0] in ('hydra', 'omegaconf') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
