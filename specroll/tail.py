"""The long tail of one rollout step: one definition for specroll's rollouts and the simulator. Torch-free.

Seer §6.2.2 measures the tail as the time spent solely on the last 10% of requests. Here it runs
from the finish that leaves the last `fraction` of the requests (rounded down) still running to the
last finish: with n requests, from the ceil(0.9 n)-th finish to the n-th.
"""

from __future__ import annotations

import math
from typing import Iterable

TAIL_FRACTION = 0.1  # Seer §6.2.2: the last 10% of requests


def tail_seconds(finish_seconds: Iterable[float], fraction: float = TAIL_FRACTION) -> float:
    """Seconds from the finish that leaves `fraction` of the requests running to the last; 0 for none."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the tail's fraction must lie in [0, 1), got {fraction}")
    finish = sorted(float(t) for t in finish_seconds)
    if not finish:
        return 0.0
    num_in_tail = math.floor(fraction * len(finish))
    return finish[-1] - finish[len(finish) - 1 - num_in_tail]
