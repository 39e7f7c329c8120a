"""make_env and the env config group: every config instantiates; bad input fails with a fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from gigpo_lab.envs import TextActionWrapper, make_env, registered_ids

CONF = Path(__file__).resolve().parents[2] / "conf"
ENV_CONFIGS = sorted(p.stem for p in (CONF / "env").glob("*.yaml"))


def compose_env(tmp_path: Path, option: str, overrides: tuple[str, ...] = ()):
    """Compose ``env=<option>`` through a test-local primary config that searches the project's conf dir."""
    from gigpo_lab.config_paths import register_schemas

    register_schemas()
    (tmp_path / "primary.yaml").write_text(
        f"defaults:\n  - env: {option}\n  - _self_\nhydra:\n  searchpath:\n    - file://{CONF}\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        return compose(config_name="primary", overrides=list(overrides))


def test_the_env_configs_exist():
    assert ENV_CONFIGS == [
        "cliffwalking",
        "frozenlake",
        "frozenlake8x8",
        "gym_discrete",
        "household",
        "minigrid_doorkey",
        "minigrid_empty",
        "scienceworld",
        "sokoban",
        "taxi",
        "textworld",
        "textworld_coin",
        "textworld_cooking",
        "textworld_treasure",
        "twx_coin",
        "twx_cookingworld",
        "twx_twc",
    ]


#: Presets that build files or a JVM when built, played by their own tests: the TextWorld presets generate games
#: (tests/envs/test_textworld.py plays them on a few small ones); the field benchmarks start a JVM and explore
#: their command vocabulary (tests/envs/test_twx.py, tests/envs/test_scienceworld.py, the latter slow).
BUILT_ELSEWHERE = ("textworld", "twx_", "scienceworld")


@pytest.mark.parametrize("option", [o for o in ENV_CONFIGS if not o.startswith(BUILT_ELSEWHERE)])
def test_every_env_config_instantiates_and_plays(tmp_path, option):
    cfg = compose_env(tmp_path, option)
    assert cfg.env._target_ == "gigpo_lab.envs.make_env" and cfg.env.name
    env = instantiate(cfg.env)
    assert isinstance(env, TextActionWrapper)
    assert env.name == cfg.env.name and env.max_turns == cfg.env.max_turns
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step(f"<action>{info['admissible_actions'][0]}</action>")
    assert not info["invalid"]


ENV_SCHEMAS = [
    ("frozenlake", "gigpo_lab.envs.frozenlake:FrozenLakeText"),
    ("sokoban", "gigpo_lab.envs.sokoban:SokobanText"),
    ("household", "gigpo_lab.envs.household:HouseholdText"),
    ("gym_discrete", "gigpo_lab.envs.gym_discrete:GymDiscreteText"),
    ("textworld", "gigpo_lab.envs.textworld_env:TextWorldText"),
]


@pytest.mark.parametrize(("schema", "env_class"), ENV_SCHEMAS, ids=[s for s, _ in ENV_SCHEMAS])
def test_env_schemas_document_and_match_the_env_keywords(schema, env_class):
    """An env schema's own fields are its env class's keyword arguments, with the same defaults, each with
    its ``#:`` doc (STYLE: every key documented once, in its schema)."""
    import dataclasses
    import importlib
    import inspect

    from gigpo_lab.config_paths import all_schemas
    from gigpo_lab.configdoc.collect import schema_docs
    from gigpo_lab.envs.schema import EnvConfig

    cls = all_schemas()[f"env/{schema}"]
    base = {f.name for f in dataclasses.fields(EnvConfig)}
    own = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
        if f.name not in base
    }
    module, name = env_class.split(":")
    params = inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters
    expected = {k: p.default for k, p in params.items() if k not in ("self", "env_id", "render_mode")}
    # the schema spells a tuple default as a list, and "none" (None) as an empty mapping where it is one
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in expected.items()} == {
        k: None if v == {} else v for k, v in own.items()
    }
    docs = schema_docs(cls)
    assert all(docs.get(f.name) for f in dataclasses.fields(cls) if f.name != "_convert_"), docs


def test_yaml_defaults_match_the_env_defaults(tmp_path):
    env = instantiate(compose_env(tmp_path, "frozenlake8x8").env)
    assert env.unwrapped.size == 8 and env.reset(seed=0)[1]["anchor"].count("\n") == 7


def test_cli_overrides_alone_adapt_a_gymnasium_env(tmp_path):
    cfg = compose_env(
        tmp_path,
        "gym_discrete",
        ("env.id=CliffWalking-v1", "env.action_names=[up,right,down,left]", "env.renderer=builtins:hex"),
    )
    env = instantiate(cfg.env)
    _, info = env.reset(seed=0)
    assert info["anchor"] == hex(36) and info["admissible_actions"] == ["up", "right", "down", "left"]
    _, reward, _, _, info = env.step("up")
    assert info["anchor"] == hex(24) and reward == -1.0


def test_the_gym_discrete_preset_does_not_count_a_hole_as_a_success(tmp_path):
    """Overriding only the id (and what the env needs) must not inherit another env's success rule: a
    FrozenLake hole ends the episode with reward 0, and it is not a success; the goal (reward 1) is."""
    lake = (
        "env.id=FrozenLake-v1",
        "+env.kwargs={is_slippery: false}",
        "env.action_names=[left,down,right,up]",
    )
    cfg = compose_env(tmp_path, "gym_discrete", lake)
    for moves, reward, success in (
        (["right", "down"], 0.0, False),  # (1, 1) is a hole on the 4x4 map
        (["down", "down", "right", "right", "down", "right"], 1.0, True),
    ):
        env = instantiate(cfg.env)
        env.reset(seed=0)
        for move in moves:
            _, r, terminated, _, info = env.step(f"<action>{move}</action>")
        assert terminated and r == reward and info["success"] is success


def test_the_taxi_preset_counts_a_delivery_and_only_it(tmp_path):
    """``env=taxi``: a dropoff at the destination with the passenger aboard pays 20 and is a success; a wrong
    dropoff pays -10 and is not, and neither is an invalid word (which costs -1, as a move does)."""
    cfg = compose_env(tmp_path, "taxi")
    env = instantiate(cfg.env)
    env.reset(seed=0)
    taxi = env.unwrapped.inner.unwrapped
    *_, dest = taxi.decode(taxi.s)
    _, r, terminated, _, info = env.step("<action>dropoff</action>")  # nobody aboard: an illegal dropoff
    assert (r, terminated, info["success"]) == (-10.0, False, False)
    _, r, terminated, _, info = env.step("<action>fly</action>")
    assert (r, terminated, info["success"], info["invalid"]) == (-1.0, False, False, True)
    stand = taxi.locs[dest]
    taxi.s = taxi.encode(stand[0], stand[1], 4, dest)  # put the taxi on the destination, passenger aboard
    _, r, terminated, _, info = env.step("<action>dropoff</action>")
    assert (r, terminated, info["success"]) == (20.0, True, True)


def test_cli_overrides_reach_env_kwargs(tmp_path):
    cfg = compose_env(tmp_path, "sokoban", ("env.height=7", "env.num_boxes=2", "env.max_turns=40"))
    env = instantiate(cfg.env)
    _, info = env.reset(seed=0)
    assert info["anchor"].count("X") + info["anchor"].count("*") == 2 and env.max_turns == 40


def test_unknown_id_lists_the_registered_ids():
    with pytest.raises(ValueError) as err:
        make_env("gigpo_lab/FrozenLak-v0", max_turns=5)
    message = str(err.value)
    assert "Unknown env id 'gigpo_lab/FrozenLak-v0'" in message
    for env_id in registered_ids():
        assert env_id in message
    assert "Did you mean ['gigpo_lab/FrozenLake-v0'" in message
    assert set(registered_ids()) == {
        "gigpo_lab/FrozenLake-v0",
        "gigpo_lab/Sokoban-v0",
        "gigpo_lab/Household-v0",
        "gigpo_lab/GymDiscrete-v0",
        "gigpo_lab/TextWorld-v0",
        "gigpo_lab/TextWorldExpress-v0",
        "gigpo_lab/ScienceWorld-v0",
    }


def test_unknown_kwarg_is_named_with_the_valid_ones():
    with pytest.raises(TypeError) as err:
        make_env("gigpo_lab/Sokoban-v0", max_turns=5, num_box=2)
    message = str(err.value)
    assert "Unknown kwargs ['num_box']" in message and "'num_boxes'" in message and "'height'" in message


def test_unknown_adapter_kwarg_is_named():
    with pytest.raises(TypeError, match=r"Unknown kwargs \['action_name'\].*'action_names'"):
        make_env("CliffWalking-v1", max_turns=5, action_name=["a"])
    with pytest.raises(TypeError) as err:
        make_env("CliffWalking-v1", max_turns=5, action_name=["a"])
    assert "env_id" not in str(err.value).split("Valid kwargs")[1]


def test_bad_inner_kwargs_name_the_adapted_env():
    with pytest.raises(ValueError, match="rejected by CliffWalking-v1"):
        make_env("CliffWalking-v1", max_turns=5, kwargs={"size": 3})
    with pytest.raises(ValueError, match="kwargs must be a mapping"):
        make_env("CliffWalking-v1", max_turns=5, kwargs=[3])


@pytest.mark.parametrize(
    ("renderer", "message"),
    [
        ("no_such_module_xyz:render", "module 'no_such_module_xyz' does not import"),
        ("no_such_module_xyz.render", "module 'no_such_module_xyz' does not import"),
        ("builtins:no_such_function", "has no function 'no_such_function'"),
        ("render", "is not a dotted path"),
    ],
)
def test_renderer_that_does_not_import_names_the_fix(renderer, message):
    with pytest.raises(ValueError, match=message) as err:
        make_env("CliffWalking-v1", max_turns=5, renderer=renderer)
    assert "'package.module:function'" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action_names": ["up", "down"]}, "must be 4 distinct names"),
        ({"action_names": ["up", "UP", "down", "left"]}, "must be 4 distinct names"),
        ({"success_on": "sometimes"}, "success_on must be one of"),
        ({"max_turns": 0}, "max_turns must be an int >= 1"),
    ],
)
def test_bad_adapter_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_env("CliffWalking-v1", **{"max_turns": 5, **kwargs})


def test_non_discrete_action_space_is_refused():
    with pytest.raises(ValueError, match="adapts only Discrete action spaces"):
        make_env("Pendulum-v1", max_turns=5)
