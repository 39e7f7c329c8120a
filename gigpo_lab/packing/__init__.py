"""Packing: compute what rows share once. The kernels under the policy, the engines and the update.

- ``tree_attention``: one attention call per node of a prefix tree (``TreeLayout``).
- ``prefix_tree``: prompts as a radix tree, packed into one sequence with its dense mask.
- ``prefill``: the rollout engine's prefills (``plain``, ``shared``, ``tree``).
- ``shared_prefix``: the update's log-probs with every shared prompt run computed once.
- ``distinct_rows``: each distinct row scored once.
- ``microbatch``: micro-batched scoring and gradient accumulation.
"""
