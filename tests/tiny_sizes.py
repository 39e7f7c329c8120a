"""The overrides that make any training run tiny (shared by conftest.py and doc_blocks.py, which also runs as a script)."""

#: Overrides that make any run tiny: 2 iterations of 2 groups x 2 envs, short episodes, no progress bar.
TINY = [
    "trainer.iterations=2",
    "trainer.eval_every=1",
    "trainer.checkpoint_every=1",
    "trainer.sample_every=1",
    "lightning.progress_bar=false",
    "lightning.num_threads=1",
    "rollout.groups=2",
    "rollout.group_size=2",
    "rollout.eval_episodes=2",
    "rollout.eval_greedy_episodes=1",
    "env.max_turns=4",
]

#: Added to TINY by the tests that need a gradient in the first iteration (one that leaves the start state):
#: with the mark's extra vocabulary word (``model.mark_unchanged``, on by default), seed 0's first TINY rollout
#: never leaves its start state, every group earns the same, and nothing moves.
MOVES_AT_ONCE = "model.mark_unchanged=false"
