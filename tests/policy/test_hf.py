"""The HF policy on a tiny random Qwen2/Llama built offline: prompt, history window, stop ids, errors."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import build_tiny_hf_model

from gigpo_lab.policy import build_hf_policy
from gigpo_lab.policy.hf import DEFAULT_SYSTEM_PROMPT

HISTORY = [
    ("grid one", "<action>up</action>"),
    ("grid two", "<action>left</action>"),
    ("grid three", "right"),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"))


def test_prompt_uses_the_chat_template(model_dir):
    policy = build_hf_policy(str(model_dir), history_window=1)
    ids = policy.build_prompt("S F\nF G", "ignored", HISTORY)
    text = policy.tokenizer.decode(ids, skip_special_tokens=False)
    expected = policy.tokenizer.hf.apply_chat_template(
        [
            {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": "grid three"},
            {"role": "assistant", "content": "right"},
            {"role": "user", "content": "S F\nF G"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == expected
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("window", [0, 1, 2, 5])
def test_history_window_truncates(model_dir, window):
    policy = build_hf_policy(str(model_dir), history_window=window)
    text = policy.prompt_text("now", HISTORY)
    kept = HISTORY[len(HISTORY) - min(window, len(HISTORY)) :]
    for observation, action in HISTORY:
        assert (observation in text) == ((observation, action) in kept)
    assert text.count("<|im_start|>user") == len(kept) + 1


def test_plain_text_fallback_without_a_chat_template(tmp_path):
    policy = build_hf_policy(
        str(build_tiny_hf_model(tmp_path, arch="llama", chat_template=False)), history_window=1
    )
    assert not policy.use_chat_template
    text = policy.tokenizer.decode(policy.build_prompt("P F", "", HISTORY[:1]), skip_special_tokens=False)
    assert (
        text
        == f"{DEFAULT_SYSTEM_PROMPT}\n\nObservation:\ngrid one\nAction: <action>up</action>\n\nObservation:\nP F\nAction: "
    )


def test_stop_ids_and_defaults(model_dir):
    policy = build_hf_policy(str(model_dir), system_prompt="Play.")
    hf = policy.tokenizer.hf
    assert set(policy.stop_ids()) == {hf.eos_token_id, *hf.convert_tokens_to_ids(["<|im_end|>", "</action>"])}
    assert policy.default_max_new_tokens == 32 and policy.system_prompt == "Play."
    assert policy.tokenizer.pad_id == hf.pad_token_id
    assert (
        policy.tokenizer.decode(policy.tokenizer.encode("<action>left</action>")) == "<action>left</action>"
    )


def test_logprobs_match_a_plain_forward(model_dir):
    """policy.logprobs equals log_softmax of the model's own logits for an unpadded row."""
    policy = build_hf_policy(str(model_dir))
    prompt = torch.tensor([policy.build_prompt("S F", "", [])])
    response = torch.tensor([policy.tokenizer.encode("<action>up</action>")])
    ones = torch.ones_like
    with torch.no_grad():
        logp, _ = policy.logprobs(
            prompt, ones(prompt, dtype=torch.bool), response, ones(response, dtype=torch.bool)
        )
        logits = policy.model(torch.cat([prompt, response], 1)).logits[0, prompt.shape[1] - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, response[0, :, None]).squeeze(-1)
    torch.testing.assert_close(logp[0], expected, atol=1e-5, rtol=0)


def test_gradient_checkpointing_still_gives_gradients(model_dir):
    policy = build_hf_policy(str(model_dir), gradient_checkpointing=True)
    policy.train()
    prompt = torch.tensor([policy.build_prompt("S F", "", [])])
    response = torch.tensor([policy.tokenizer.encode("left")])
    ones = torch.ones_like
    logp, _ = policy.logprobs(
        prompt, ones(prompt, dtype=torch.bool), response, ones(response, dtype=torch.bool)
    )
    logp.sum().backward()
    assert all(p.grad is not None for p in policy.parameters() if p.requires_grad)


@pytest.mark.parametrize("make_path", [lambda tmp: tmp / "missing", lambda tmp: tmp])
def test_bad_path_is_a_clear_error(tmp_path, make_path):
    path = make_path(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"model\.path=.*config\.json") as err:
        build_hf_policy(str(path))
    assert str(path) in str(err.value)


def test_bad_dtype_is_refused(model_dir):
    with pytest.raises(ValueError, match="dtype"):
        build_hf_policy(str(model_dir), dtype="float8")
