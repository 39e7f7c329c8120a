"""The update's forward with the prompts' common prefix run once (gigpo_lab/packing/shared_prefix.py) computes
what ``Policy.logprobs`` on the full rows computes: log-probs, entropies and gradients within 1e-5 in float32,
on a tiny HF model (with and without LoRA, and as the adapter-free KL reference) and on the tiny GPT policy
(its dense packed forward, with and without a precomputed opening); the micro-batched loss with it equals the
whole-minibatch loss, in row- or token-bounded chunks; configs it cannot serve are refused at compose time."""

from __future__ import annotations

import pytest
import torch
from hf_tiny import build_tiny_hf_model
from hypothesis import given, settings
from hypothesis import strategies as st
from row_batches import grads, minibatch, pad_rows

from gigpo_lab.algorithm.loss import PolicyLoss
from gigpo_lab.config_paths import compose_config
from gigpo_lab.errors import ConfigError
from gigpo_lab.packing.microbatch import chunked_logprobs, microbatched_loss
from gigpo_lab.packing.shared_prefix import prefix_sorted_chunks, prefix_tree, shared_prefix_logprobs
from gigpo_lab.policy import build_hf_policy, build_tiny_policy
from gigpo_lab.training.config_checks import validate_config

TOL = {"rtol": 0.0, "atol": 1e-5}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_hf_model(tmp_path_factory.mktemp("qwen2"), hidden_size=64, num_layers=2)


def _group_rows(policy, suffixes: list[str], answers: list[str], answer_prefix: str = "<action>"):
    """Rows whose prompts share the system prompt and the opening observation, then differ (a group's turns)."""
    prompts = [policy.build_prompt("S F F H F G " + s, "", []) for s in suffixes]
    responses = [policy.tokenizer.encode(answer_prefix + a) for a in answers]
    return pad_rows(prompts, responses, policy.tokenizer.pad_id)


def _logprobs_and_grads(policy, fn, cols, weights):
    """logp, entropy and the gradient of a weighted sum of both (so every position and row counts)."""
    policy.zero_grad(set_to_none=True)
    logp, entropy = fn(*cols)
    ((logp * weights).sum() + 0.1 * (entropy * weights).sum()).backward()
    return logp.detach(), entropy.detach(), grads(policy)


@settings(max_examples=15, deadline=None)
@given(
    suffix_words=st.lists(st.integers(0, 6), min_size=2, max_size=6),
    answer_words=st.lists(st.integers(1, 5), min_size=6, max_size=6),
    lora=st.booleans(),
)
def test_shared_prefix_logprobs_and_gradients_equal_the_plain_forward(
    model_dir, suffix_words, answer_words, lora
):
    policy = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4, "seed": 1} if lora else None)
    policy.train()
    words = ["F", "H", "G", "S", "F H", "up left"]
    suffixes = [" ".join(words[: k % 6] * (1 + k)) for k in suffix_words]
    answers = [" ".join(["up"] * answer_words[i]) for i in range(len(suffixes))]
    cols = _group_rows(policy, suffixes, answers)
    prompts = [ids[mask].tolist() for ids, mask in zip(cols[0], cols[1], strict=True)]
    assert any(node.row < 0 for node in prefix_tree(prompts, 1))  # the shared path really runs
    weights = torch.randn(cols[2].shape, generator=torch.Generator().manual_seed(len(suffixes)))
    plain = _logprobs_and_grads(policy, policy.logprobs, cols, weights)
    shared = _logprobs_and_grads(policy, lambda *c: shared_prefix_logprobs(policy, *c), cols, weights)
    for a, b in zip(plain, shared, strict=True):
        torch.testing.assert_close(b, a, **TOL)
    assert plain[2].abs().max() > 0  # gradients reached the trained parameters


TINY_WORDS = ["up", "down", "left", "right", "S", "F", "H", "G"]


@settings(max_examples=25, deadline=None)
@given(
    states=st.lists(st.integers(0, 3), min_size=2, max_size=12),
    histories=st.lists(st.lists(st.integers(0, 3), max_size=2), min_size=12, max_size=12),
    answers=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    opening=st.booleans(),
    seed=st.integers(0, 100),
)
def test_the_tiny_policys_packed_forward_equals_its_plain_rows(states, histories, answers, opening, seed):
    """Rows as the tiny policy lays them out (a state picture, then its action history), scored through the packed
    tree (and, with ``opening``, after a common opening run once by ``prefix_kv``): the same log-probs,
    entropies and gradients as the plain rows."""
    policy = build_tiny_policy(TINY_WORDS, d_model=32, n_layers=2, n_heads=2, history_window=2, seed=seed)
    pictures = ["S F F H F F G G", "S F F H F H F G", "S F F H H F F G", "S F G G G F F H"]
    moves = ["up", "down", "left", "right"]
    n = len(states)
    prompts = [
        policy.build_prompt("", pictures[s], [("", moves[a]) for a in h])
        for s, h in zip(states, histories[:n], strict=True)
    ]
    responses = [[policy.tokenizer.encode(moves[a])[0], policy.tokenizer.eos_id] for a in answers[:n]]
    cols = pad_rows(prompts, responses, policy.tokenizer.pad_id)
    past = {}
    if opening:  # every picture opens with "S F": run it once
        skip = 2
        past = {"past": policy.prefix_kv(torch.tensor(prompts[0][:skip]))}
    weights = torch.randn(cols[2].shape, generator=torch.Generator().manual_seed(seed))
    plain = _logprobs_and_grads(policy, policy.logprobs, cols, weights)
    shared = _logprobs_and_grads(policy, lambda *c: shared_prefix_logprobs(policy, *c, **past), cols, weights)
    for a, b in zip(plain, shared, strict=True):
        torch.testing.assert_close(b, a, **TOL)
    assert plain[2].abs().max() > 0  # gradients reached the trained parameters


def test_the_adapter_free_reference_scores_the_same_with_shared_prefixes(model_dir):
    policy = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4, "seed": 2}).eval()
    with torch.no_grad():  # move the adapters off zero, so that the reference differs from the policy
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    reference = policy.make_reference()
    cols = _group_rows(policy, ["F", "F H G", "H"], ["up", "down up", "left"])
    want = reference.logprobs(*cols)
    got = shared_prefix_logprobs(reference, *cols)
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, **TOL)
    assert (policy.logprobs(*cols)[0] - want[0]).abs().max() > 1e-3  # the reference really is the base


def test_without_a_long_enough_common_prefix_it_is_the_plain_forward(model_dir):
    policy = build_hf_policy(str(model_dir)).eval()
    pad = policy.tokenizer.pad_id
    cols = pad_rows([[5, 6, 7], [8, 6, 7]], [[9], [9, 10]], pad)  # no common first token
    want, got = policy.logprobs(*cols), shared_prefix_logprobs(policy, *cols)
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)


@settings(max_examples=200, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=10),
    min_shared=st.integers(1, 4),
)
def test_the_prefix_tree_rebuilds_every_prompt_and_shares_only_long_runs(prompts, min_shared):
    nodes = prefix_tree(prompts, min_shared)
    leaves = [node for node in nodes if node.row >= 0]
    assert sorted(node.row for node in leaves) == list(range(len(prompts)))
    below = [set() for _ in nodes]
    for k, node in enumerate(nodes):
        assert node.parent < k  # a parent comes before its children
    for leaf in leaves:
        assert leaf.tokens  # its own last prompt token predicts the response's first
        text, k = list(leaf.tokens), leaf.parent
        while k >= 0:
            text, k = nodes[k].tokens + text, nodes[k].parent
        assert text == prompts[leaf.row]
        k = leaf.parent
        while k >= 0:
            below[k].add(leaf.row)
            k = nodes[k].parent
    for k, node in enumerate(nodes):
        if node.row < 0:
            assert len(node.tokens) >= min_shared and len(below[k]) >= 2


def _trie_tokens(prompts: list[list[int]]) -> int:
    """The tokens of a trie of ``prompts``: its distinct non-empty prefixes (an oracle apart from the code's
    longest-common-prefix count)."""
    return len({tuple(p[:k]) for p in prompts for k in range(1, len(p) + 1)})


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=6), min_size=1, max_size=12),
    answers=st.lists(st.integers(1, 3), min_size=12, max_size=12),
    size=st.integers(0, 5),
    max_tokens=st.sampled_from([0, 4, 8, 15]),
)
def test_prefix_sorted_chunks_cover_every_row_once_in_prompt_order(prompts, answers, size, max_tokens):
    """Each chunk is a run of consecutive rows in prompt order, within the row and token limits (a row over the
    token limit alone), no chunk could have taken the next run's first row, and the largest come first."""
    answers = torch.tensor(answers[: len(prompts)])
    cols = pad_rows(prompts, [[1]] * len(prompts), pad=0)
    chunks = prefix_sorted_chunks(cols[0], cols[1], size, max_tokens, answers)
    order = torch.cat(chunks).tolist()
    assert sorted(order) == list(range(len(prompts)))

    def cost(rows):
        return _trie_tokens([prompts[i] for i in rows]) + int(answers[rows].sum())

    # the rows in prompt order, equal prompts by row index (a stable sort), then the chunks in that order
    def rank(i):
        return (prompts[i], i)

    runs = sorted((sorted(c.tolist(), key=rank) for c in chunks), key=lambda r: rank(r[0]))
    assert [prompts[i] for run in runs for i in run] == sorted(prompts)
    for run, after in zip(runs, runs[1:] + [None], strict=True):
        assert size <= 0 or len(run) <= size
        assert max_tokens <= 0 or len(run) == 1 or cost(run) <= max_tokens
        if after is not None:  # greedy: the next row would have broken a limit
            assert (0 < size == len(run)) or (max_tokens > 0 and cost(run + after[:1]) > max_tokens)
    costs = [cost(c.tolist()) for c in chunks]
    assert costs == sorted(costs, reverse=True)


@pytest.mark.parametrize(
    ("size", "max_tokens"), [(2, 0), (3, 0), (0, 170), (3, 200), (0, 0)]
)  # 141-144-token prompts; (0, 0): one packed chunk of the whole minibatch
def test_micro_batched_loss_with_shared_prefixes_equals_the_whole_minibatch(model_dir, size, max_tokens):
    policy = build_hf_policy(str(model_dir), lora={"enabled": True, "r": 4, "seed": 5}).train()
    suffixes = ["F", "F H", "H", "G G", "F", "H H H", "G"]
    answers = ["up", "down", "left", "up up", "up", "right", "down"]
    cols = _group_rows(policy, suffixes, answers)
    mb = minibatch(policy, cols, torch.Generator().manual_seed(3), with_ref=False)
    loss_fn = PolicyLoss(entropy_coef=0.01)
    policy.zero_grad(set_to_none=True)
    logp_all, entropy_all = policy.logprobs(*cols)
    whole = loss_fn(logp_all, mb.old_logprobs, mb.advantages, mb.response_mask, entropy_all, None)
    whole.loss.backward()
    want = grads(policy)
    policy.zero_grad(set_to_none=True)
    last, out = microbatched_loss(
        policy, loss_fn, mb, size, 1.0, torch.Tensor.backward, shared_prefix=True, max_tokens=max_tokens
    )
    last.backward()
    torch.testing.assert_close(out.loss, whole.loss.detach(), **TOL)
    torch.testing.assert_close(grads(policy), want, **TOL)
    with torch.no_grad():
        scored = chunked_logprobs(policy, cols, size, 1.0, torch.device("cpu"), True, max_tokens)
    torch.testing.assert_close(scored[0], logp_all.detach(), **TOL)


def test_shared_prefix_defaults_to_the_policys_choice_and_bad_combinations_are_refused(model_dir):
    hf = ["model=hf", f"model.path={model_dir}"]
    tiny, hf_cfg = compose_config([]), compose_config(hf)
    assert tiny.trainer.shared_prefix is None and tiny.trainer.shared_prefix_tokens is None
    policy = build_tiny_policy(TINY_WORDS)
    assert (policy.packed_update, policy.packed_tokens) == (True, 1024)
    validate_config(tiny)
    validate_config(hf_cfg)
    # a token budget needs packing: the HF policies' null is off, the tiny policy's on
    with pytest.raises(ConfigError, match="trainer.shared_prefix_tokens=600 bounds the packed chunks"):
        validate_config(compose_config([*hf, "trainer.shared_prefix_tokens=600"]))
    validate_config(compose_config(["trainer.shared_prefix_tokens=600"]))
    with pytest.raises(ConfigError, match="trainer.shared_prefix_tokens=600 bounds the packed chunks"):
        validate_config(compose_config(["trainer.shared_prefix=false", "trainer.shared_prefix_tokens=600"]))
    with pytest.raises(ConfigError, match="activation checkpointing would recompute without the tree"):
        validate_config(
            compose_config([*hf, "trainer.shared_prefix=true", "model.gradient_checkpointing=true"])
        )
    validate_config(compose_config([*hf, "model.gradient_checkpointing=true"]))  # null: no packing for HF
    validate_config(compose_config([*hf, "trainer.shared_prefix=true"]))  # whole minibatches, packed
    validate_config(compose_config([*hf, "trainer.shared_prefix=true", "trainer.micro_batch_size=4"]))
