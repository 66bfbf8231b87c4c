"""Scheduling and placement policies for a multi-worker rollout; torch-free.

Each module holds one policy from the seed papers as plain functions or small classes over numbers
and numpy arrays, so that the cluster simulator (`specroll.sim`) and the real multi-worker rollout
run the very same decisions:

    static             veRL-style static assignment of groups to workers
    dispatch           the dispatchers over a rollout's workers: static queues or divided chunks
    divided            Seer's chunked requests and least-loaded instance selection (§4.2)
    context_aware      Seer's probe-first, then longest-first request order (§4.3, Algorithm 1)
    adaptive_range     Seer's draft length from the current concurrency (§4.4)
    placement          SpecActor's TGS model, plan search and reconfiguration (§4.1, Alg. 1-2)
    fastest_of_n       SpecActor's greedy Fastest-of-N assignment (§4.2, Algorithm 3)

Speculation policies that the engine runs too (DAS budgets, TLT's threshold and bandit, auto) are
not here: the simulator runs the engine's own classes from `specroll.policies`, and expected tokens
per forward come from `specroll.policies.speculation_math`.
"""
