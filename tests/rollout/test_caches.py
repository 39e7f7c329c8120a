"""The rollout's memos change no output: FrozenLake's per-state anchors and the tiny policy's prompt ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_lab.envs import make_env
from gigpo_lab.policy import build_tiny_policy

ACTIONS = ("left", "down", "right", "up", "jump")


def rendered(lake) -> str:
    """The oracle: the grid of ``lake.desc`` with ``P`` on ``lake.s``, drawn from scratch."""
    rows = [[c.decode() for c in row] for row in lake.desc]
    rows[int(lake.s) // lake.ncol][int(lake.s) % lake.ncol] = "P"
    return "\n".join(" ".join(r) for r in rows)


@settings(max_examples=15, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
    moves=st.lists(st.sampled_from(ACTIONS), max_size=12),
    random_map=st.booleans(),
)
def test_anchor_is_the_current_grid_across_maps_and_moves(seeds, moves, random_map):
    env = make_env(id="gigpo_lab/FrozenLake-v0", max_turns=50, name="frozenlake", random_map=random_map)
    for seed in seeds:  # one env, reset onto new (random) maps: the memo must follow the map
        _, info = env.reset(seed=seed)
        assert info["anchor"] == rendered(env.unwrapped._lake)
        for move in moves:
            _, _, terminated, truncated, info = env.step(move)
            assert info["anchor"] == rendered(env.unwrapped._lake) == env.unwrapped.anchor()
            if terminated or truncated:
                break
    env.close()


@settings(max_examples=30, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="SFHGP left\n<>/x", max_size=30), min_size=1, max_size=6),
    window=st.integers(0, 3),
    source=st.sampled_from(["anchor", "observation"]),
)
def test_prompt_ids_equal_a_fresh_tokenisation(texts, window, source):
    vocab = ["S", "F", "H", "G", "P", "left", "\n"]
    policy = build_tiny_policy(
        vocab,
        d_model=16,
        n_heads=2,
        max_seq_len=32,
        history_window=window,
        prompt_source=source,
        mark_unchanged=False,
    )
    tok = policy.tokenizer
    history = [(t, t[::-1]) for t in texts[:-1]]
    for _ in range(2):  # the second call reads the memo
        ids = policy.build_prompt(texts[-1], texts[-1].upper(), history)
        # the state, then the newest entries that fit in 32 - 8 tokens, oldest first
        expected = tok.encode(texts[-1].upper() if source == "anchor" else texts[-1]) + [tok.sep_id]
        entries = [
            (tok.encode(obs) if source == "observation" else []) + tok.encode(action) + [tok.sep_id]
            for obs, action in (history[-window:] if window else [])
        ]
        while entries and len(expected) + sum(map(len, entries)) > 32 - 8:
            entries.pop(0)
        expected = expected[-(32 - 8) :] + [t for entry in entries for t in entry]
        assert ids == expected
        ids.append(-1)  # the caller owns the returned list: changing it must not reach the memo
