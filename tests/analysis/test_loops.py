"""``gigpo_lab.analysis.loops`` and ``experiments/greedy_loops.py``: the first cycle of an episode against a
brute-force oracle, and the report of a real run against what the run itself logged."""

from __future__ import annotations

import math

import pytest
from experiment_scripts import load_script
from hypothesis import given
from hypothesis import strategies as st

from gigpo_lab.analysis.loops import action_token_ids, first_loop
from gigpo_lab.policy.word_tokenizer import WordTokenizer
from gigpo_lab.train import train
from tests.real_runs import history, run_cfg


def _oracle(anchors: list[str]) -> tuple[int, int] | None:
    """The smallest i with an equal earlier state, and that state's first index."""
    for i in range(len(anchors)):
        for j in range(i):
            if anchors[j] == anchors[i]:
                return j, i
    return None


@given(st.lists(st.sampled_from("abcdef"), max_size=12))
def test_first_loop_is_the_first_repeat(anchors):
    assert first_loop(anchors) == _oracle(anchors)


def test_action_ids_only_when_every_name_is_one_known_token():
    tok = WordTokenizer(["north", "south", "pick"])
    assert action_token_ids(tok, ["north", "south"]) == [tok.encode("north")[0], tok.encode("south")[0]]
    assert action_token_ids(tok, ["north", "pick up"]) is None  # two words
    assert action_token_ids(tok, ["north", "east"]) is None  # not in the vocabulary


def _script():
    return load_script("greedy_loops.py")


@pytest.mark.parametrize(
    "light",
    [[], ["loss.kl_coef=0.05", "trainer.checkpoint_frozen_base=false"]],
    ids=["whole", "without_frozen_reference"],
)
def test_the_report_of_a_real_run_agrees_with_its_own_final_evaluation(tiny_overrides, tmp_path, light):
    # 20 turns: the untrained greedy policy walks into the map's edge and stays, a cycle of one step; the run
    # evaluates greedily, as the report does (the default evaluation samples), and stays untrained (lr 0).
    # "without_frozen_reference": its checkpoint leaves out the KL reference's weights, which the script rebuilds
    cfg = run_cfg(
        tiny_overrides,
        tmp_path,
        "run",
        "env.max_turns=20",
        "rollout.eval_greedy=true",
        "trainer.optimizer.lr=0",
        *light,
    )
    train(cfg)
    overrides = [o for o in tiny_overrides if not o.startswith(("output_dir", "tracking.uri"))]
    overrides += ["env.max_turns=20", *light]
    episodes = cfg.rollout.eval_episodes
    result = _script().report(str(tmp_path / "run" / "checkpoints" / "last.ckpt"), overrides, episodes)
    (final_eval,) = [
        v for s, v in history(cfg.tracking.uri, "eval/success_rate") if s == cfg.trainer.iterations
    ]
    (revisits,) = [
        v for s, v in history(cfg.tracking.uri, "eval/revisit_rate") if s == cfg.trainer.iterations
    ]
    # greedy evaluation of the same weights on the same held-out seeds: the same success rate
    assert result["greedy_success"] == final_eval
    # a failed episode is reported when it revisited a state; the untrained policy fails every episode, so the
    # loops reported are the revisits the run logged
    assert final_eval == 0.0
    assert len(result["loops"]) == round(revisits * episodes) > 0
    for loop in result["loops"]:
        cycle = loop["cycle"]
        assert cycle and cycle[-1]["next_state"] == cycle[0]["state"]  # it comes back to where it started
        for step, following in zip(cycle, cycle[1:], strict=False):
            assert step["next_state"] == following["state"]
        for step in cycle:
            probs = step["probabilities"]
            assert probs is not None and sum(probs.values()) <= 1 + 1e-6
            if step["action"] in probs:  # greedy decoding answered the most likely action word
                assert math.isclose(probs[step["action"]], max(probs.values()))
