"""The tiny policy: deterministic init, prompt layout, and log-probs that ignore padding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.packing.padding import left_pad
from gigpo_lab.policy import build_tiny_policy

VOCAB = ["S", "F", "H", "G", "P", "left", "right", "up", "down", "\n"]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "qk_norm"])
def policy(request):
    return build_tiny_policy(
        VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=4,
        max_seq_len=64,
        seed=0,
        qk_norm=request.param,
        mark_unchanged=False,
        history_window=0,
    )


def test_qk_norm_adds_only_norm_parameters_and_keeps_the_init_draws():
    """qk_norm adds a LayerNorm per q and k (ones and zeros), and every other weight is drawn the same."""
    plain = build_tiny_policy(
        VOCAB, d_model=32, seed=3, qk_norm=False, mark_unchanged=False, history_window=0
    ).state_dict()
    normed = build_tiny_policy(
        VOCAB, d_model=32, seed=3, qk_norm=True, mark_unchanged=False, history_window=0
    ).state_dict()
    extra = sorted(set(normed) - set(plain))
    assert extra and all(".q_norm." in k or ".k_norm." in k for k in extra)
    assert all(torch.equal(plain[k], normed[k]) for k in plain)


def test_init_depends_only_on_seed():
    torch.manual_seed(123)
    a = build_tiny_policy(
        VOCAB, d_model=32, seed=7, qk_norm=False, mark_unchanged=False, history_window=0
    ).state_dict()
    torch.manual_seed(456)
    b = build_tiny_policy(
        VOCAB, d_model=32, seed=7, qk_norm=False, mark_unchanged=False, history_window=0
    ).state_dict()
    c = build_tiny_policy(
        VOCAB, d_model=32, seed=8, qk_norm=False, mark_unchanged=False, history_window=0
    ).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_prompt_is_anchor_then_sep(policy):
    tok = policy.tokenizer
    ids = policy.build_prompt("You are on a lake.\nP F", "P F\nH G", [("obs", "left")])
    assert tok.decode(ids) == "P F\nH G <sep>"
    assert policy.stop_ids() == [tok.eos_id, tok.action_close_id]
    assert policy.default_max_new_tokens == 1


def test_history_window_keeps_the_last_actions_after_the_state():
    policy = build_tiny_policy(VOCAB, d_model=32, history_window=2, qk_norm=False, mark_unchanged=False)
    history = [("S", "up"), ("H", "<action>down</action>"), ("F", "left")]
    ids = policy.build_prompt("obs", "P F", history)
    assert policy.tokenizer.decode(ids) == "P F <sep> <action>down</action> <sep> left <sep>"
    observed = build_tiny_policy(
        VOCAB, d_model=32, history_window=1, prompt_source="observation", qk_norm=False, mark_unchanged=False
    )
    assert observed.tokenizer.decode(observed.build_prompt("G", "P F", history)) == "G <sep> F left <sep>"


def test_mark_unchanged_ends_the_entries_whose_action_left_the_observation_as_it_was():
    """Entry i is marked when the observation after it (entry i+1's, or the current one for the newest) equals
    its own; the marks do not move the state, and the unmarked default is the layout above."""
    policy = build_tiny_policy(VOCAB, d_model=32, history_window=3, mark_unchanged=True, qk_norm=False)
    history = [("S", "up"), ("F", "up"), ("F", "left"), ("H", "down")]
    assert policy.tokenizer.decode(policy.build_prompt("H", "P", history)) == (
        "P <sep> up unchanged <sep> left <sep> down unchanged <sep>"
    )
    assert policy.tokenizer.decode(policy.build_prompt("G", "P", history)) == (
        "P <sep> up unchanged <sep> left <sep> down <sep>"
    )
    plain = build_tiny_policy(VOCAB, d_model=32, history_window=3, qk_norm=False, mark_unchanged=False)
    assert (
        plain.tokenizer.decode(plain.build_prompt("H", "P", history))
        == "P <sep> up <sep> left <sep> down <sep>"
    )


def test_mark_unchanged_appends_its_word_and_keeps_the_other_ids():
    plain, marked = (
        build_tiny_policy(VOCAB, d_model=32, qk_norm=False, mark_unchanged=False, history_window=0),
        build_tiny_policy(VOCAB, d_model=32, mark_unchanged=True, qk_norm=False, history_window=0),
    )
    assert marked.tokenizer.vocab_size == plain.tokenizer.vocab_size + 1
    assert all(marked.tokenizer.token_to_id[t] == i for t, i in plain.tokenizer.token_to_id.items())
    assert marked.tokenizer.token_to_id["unchanged"] == plain.tokenizer.vocab_size


def test_mark_unchanged_without_its_word_is_refused_with_the_fix():
    from gigpo_lab.policy.tiny import TinyPolicy

    plain = build_tiny_policy(VOCAB, d_model=32, qk_norm=False, mark_unchanged=False, history_window=0)
    with pytest.raises(ValueError, match="'unchanged'.*mark_unchanged=True"):
        TinyPolicy(plain.tokenizer, plain.model, mark_unchanged=True)


def test_mark_unchanged_marks_a_move_into_a_wall_on_taxi():
    """Real gymnasium Taxi through the lab's adapter: from the top row, `north` leaves the state as it was and
    is marked; `south` moves the taxi and is not."""
    from hydra.utils import instantiate

    from gigpo_lab.config_paths import compose_config

    env = instantiate(compose_config(["env=taxi"]).env)
    policy = build_tiny_policy(
        env.unwrapped.vocabulary(), d_model=32, history_window=2, mark_unchanged=True, qk_norm=False
    )
    for seed in range(200):  # a start in the top row
        obs, info = env.reset(seed=seed)
        if info["anchor"].startswith("row 0 "):
            break
    history = []
    for action in ("north", "south"):
        before = obs
        history.append((obs, action))
        obs, _, _, _, info = env.step(action)
        assert (obs == before) == (action == "north")
    text = policy.tokenizer.decode(policy.build_prompt(obs, info["anchor"], history))
    assert text.endswith("<sep> north unchanged <sep> south <sep>")


def test_the_state_sits_at_the_same_positions_whatever_the_history():
    policy = build_tiny_policy(VOCAB, d_model=32, history_window=2, qk_norm=False, mark_unchanged=False)
    state = policy.build_prompt("", "P F H", [])
    for history in ([("S", "up")], [("S", "up"), ("F", "down")], [("S", "left")] * 5):
        assert policy.build_prompt("", "P F H", history)[: len(state)] == state


def test_long_prompts_are_left_truncated():
    policy = build_tiny_policy(
        VOCAB, d_model=32, max_seq_len=16, qk_norm=False, mark_unchanged=False, history_window=0
    )
    ids = policy.build_prompt("", "F " * 40 + "G", [])
    assert len(ids) == 16 - 8 and policy.tokenizer.decode(ids[-2:]) == "G <sep>"


def test_a_long_history_loses_its_oldest_entries_first():
    policy = build_tiny_policy(
        VOCAB, d_model=32, max_seq_len=16, history_window=5, qk_norm=False, mark_unchanged=False
    )  # 8 prompt tokens
    history = [("", "up"), ("", "down"), ("", "left"), ("", "right")]
    ids = policy.build_prompt("", "F H G", history)  # 4 state tokens, then 2 per entry: room for two
    assert policy.tokenizer.decode(ids) == "F H G <sep> left <sep> right <sep>"
    state_only = policy.build_prompt("", "F " * 40 + "G", history)  # no room left: the state alone, truncated
    assert len(state_only) == 8 and policy.tokenizer.decode(state_only[-2:]) == "G <sep>"


def test_bad_prompt_source_is_refused():
    with pytest.raises(ValueError, match="prompt_source"):
        build_tiny_policy(VOCAB, prompt_source="pixels")


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    extra_pad=st.integers(0, 6),
    response_len=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_logprobs_do_not_depend_on_padding(policy, lengths, extra_pad, response_len, seed):
    """A row scores the same alone or in a batch padded wider, and masked entries are exactly 0."""
    g = torch.Generator().manual_seed(seed)
    vocab = policy.tokenizer.vocab_size
    prompts = [torch.randint(6, vocab, (n,), generator=g).tolist() for n in lengths]
    ids, mask = left_pad(prompts, policy.tokenizer.pad_id)
    ids = torch.nn.functional.pad(ids, (extra_pad, 0))
    mask = torch.nn.functional.pad(mask, (extra_pad, 0))
    response = torch.randint(6, vocab, (len(prompts), response_len), generator=g)
    response_mask = torch.ones_like(response, dtype=torch.bool)
    response_mask[0, 1:] = False
    with torch.no_grad():
        logp, entropy = policy.logprobs(ids, mask, response, response_mask)
        for i, prompt in enumerate(prompts):
            alone = torch.tensor([prompt])
            single, _ = policy.logprobs(
                alone, torch.ones_like(alone, dtype=torch.bool), response[i : i + 1], response_mask[i : i + 1]
            )
            torch.testing.assert_close(logp[i : i + 1], single, atol=1e-5, rtol=0)
    assert (logp[~response_mask] == 0).all() and (entropy[~response_mask] == 0).all()
    assert (logp[response_mask] < 0).all() and (entropy[response_mask] > 0).all()


def test_logprobs_are_differentiable(policy):
    ids = torch.tensor([[0, 7, 8], [9, 10, 11]])
    mask = ids != 0
    response = torch.tensor([[12, 1], [13, 0]])
    logp, entropy = policy.logprobs(ids, mask, response, response != 0)
    (logp.sum() + entropy.sum()).backward()
    assert policy.model.tok_emb.weight.grad is not None
    policy.zero_grad()


def test_commands_of_several_words_are_tokens_after_the_others_and_one_word_commands_change_nothing():
    """``actions``: a multi-word command is one more token (after ``unchanged``), so the one-token response can
    be it; an env whose commands are words (every grid env) builds the very same policy, weights included."""
    kwargs = dict(d_model=32, seed=5, qk_norm=False, mark_unchanged=True, history_window=0)
    base = build_tiny_policy(VOCAB, **kwargs)
    words = build_tiny_policy(VOCAB, actions=["left", "right", "up", "down"], **kwargs)
    assert words.tokenizer.tokens == base.tokenizer.tokens
    assert all(torch.equal(v, words.state_dict()[k]) for k, v in base.state_dict().items())
    phrased = build_tiny_policy([*VOCAB, "go", "east"], actions=["go east", "left"], **kwargs)
    assert phrased.tokenizer.tokens[-2:] == ["unchanged", "go east"]
    assert phrased.tokenizer.decode([phrased.tokenizer.vocab_size - 1]) == "go east"
