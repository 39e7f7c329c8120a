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
    "env.max_turns=4",
]
