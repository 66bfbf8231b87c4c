"""Scheduling and placement policies for a multi-worker rollout; torch-free.

Each module holds one policy from the seed papers as plain functions or small classes over numbers
and numpy arrays, so that the cluster simulator (`specroll.sim`) and the real multi-worker rollout
run the very same decisions:

    speculation_math   expected tokens per forward for a draft length and acceptance rate
    static             veRL-style static assignment of groups to workers
    dispatch           the dispatchers over a rollout's workers: static queues or divided chunks
    divided            Seer's chunked requests and least-loaded instance selection (§4.2)
    context_aware      Seer's probe-first, then longest-first request order (§4.3, Algorithm 1)
    adaptive_range     Seer's draft length from the current concurrency (§4.4)
    placement          SpecActor's TGS model, plan search and reconfiguration (§4.1, Alg. 1-2)
    fastest_of_n       SpecActor's greedy Fastest-of-N assignment (§4.2, Algorithm 3)
    draft_budget       DAS length-aware speculative budgets (§4.2, eq. 1-9)
    bandit             TLT's elastic threshold and bucketed epsilon-greedy selector (§5.1-5.2)
"""
