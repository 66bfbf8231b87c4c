"""veRL-style static assignment: whole groups are split evenly across workers before the rollout.

veRL divides the step's (shuffled) prompt batch into one contiguous micro-batch per rollout worker
(SpecActor §2.1, Seer §4.2); a group never leaves its worker. Seeded shuffling stands in for the
data loader's shuffle.
"""

from __future__ import annotations

import numpy as np


def assign_groups(num_groups: int, num_workers: int, rng: np.random.Generator) -> np.ndarray:
    """Worker index per group: a shuffled order cut into num_workers near-equal contiguous parts."""
    if num_groups < 1 or num_workers < 1:
        raise ValueError("need at least one group and one worker")
    order = rng.permutation(num_groups)
    workers = np.empty(num_groups, dtype=np.int64)
    workers[order] = np.arange(num_groups) * num_workers // num_groups
    return workers
