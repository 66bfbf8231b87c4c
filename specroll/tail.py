"""The long tail of one rollout step: one definition for specroll's rollouts and the simulator. Torch-free.

Seer §6.2.2 measures the tail as the time spent solely on the last 10% of requests. Here it runs
from the finish that leaves the last `fraction` of the requests (rounded down) still running to the
last finish: with n requests, from the ceil(0.9 n)-th finish to the n-th. Its share of the makespan
(`tail_share`) is the figure that says whether a workload has a tail to speed up.

The drain is the longer stretch in which the batch only shrinks: it starts at the first finish after
which no request waits for admission (nothing is left to take the freed slot) and runs to the end.
Speculation pays most there, where a forward's batch is small (`tail_profile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

TAIL_FRACTION = 0.1  # Seer §6.2.2: the last 10% of requests
BATCH_MOMENTS = (0.25, 0.5, 0.75, 0.9)  # shares of the makespan at which `tail_profile` reads the batch


def tail_seconds(finish_seconds: Iterable[float], fraction: float = TAIL_FRACTION) -> float:
    """Seconds from the finish that leaves `fraction` of the requests running to the last; 0 for none."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the tail's fraction must lie in [0, 1), got {fraction}")
    finish = sorted(float(t) for t in finish_seconds)
    if not finish:
        return 0.0
    num_in_tail = math.floor(fraction * len(finish))
    return finish[-1] - finish[len(finish) - 1 - num_in_tail]


def tail_share(
    finish_seconds: Iterable[float], makespan_seconds: float, fraction: float = TAIL_FRACTION
) -> float:
    """`tail_seconds` over the makespan: the share of the step's wall time spent on the last 10% of
    requests; 0 for an empty step."""
    if makespan_seconds <= 0.0:
        return 0.0
    return tail_seconds(finish_seconds, fraction) / makespan_seconds


@dataclass(frozen=True)
class BatchSample:
    """One engine iteration, as the rollout's clock saw it end."""

    seconds: float  # when it ended, from the start of the rollout
    batch_size: int  # requests it ran
    num_finished: int  # of those, the requests it finished
    num_waiting: int  # requests queued for admission after it


@dataclass(frozen=True)
class TailProfile:
    """How a rollout's batch emptied: shares of its makespan, and the batch at moments of it."""

    tail_share: float  # the last 10% of requests (`tail_share`)
    drain_share: float  # from the drain's start to the end (`drain_start_seconds`)
    batch_at: dict[str, int]  # share of the makespan ("50%") -> the batch running then


def finish_seconds(samples: Iterable[BatchSample]) -> list[float]:
    """Each finished request's finish time: the end of the iteration that finished it."""
    return [s.seconds for s in samples for _ in range(s.num_finished)]


def drain_start_seconds(samples: Sequence[BatchSample], makespan_seconds: float) -> float:
    """The end of the first iteration that finished a request and left none waiting: from then on every
    finish shrinks the batch. The makespan where no iteration did (an empty step)."""
    return next((s.seconds for s in samples if s.num_finished and not s.num_waiting), makespan_seconds)


def batch_at(samples: Sequence[BatchSample], seconds: float) -> int:
    """The batch of the iteration running at `seconds`: the first to end at or after it (the last
    iteration's past the end); 0 for no iterations."""
    running = next((s for s in samples if s.seconds >= seconds), samples[-1] if samples else None)
    return 0 if running is None else running.batch_size


def tail_profile(samples: Sequence[BatchSample], makespan_seconds: float) -> TailProfile:
    """The tail's and the drain's shares of the makespan, and the batch at `BATCH_MOMENTS` of it."""
    if makespan_seconds <= 0.0:
        return TailProfile(0.0, 0.0, {})
    drain = makespan_seconds - drain_start_seconds(samples, makespan_seconds)
    return TailProfile(
        tail_share(finish_seconds(samples), makespan_seconds),
        max(drain, 0.0) / makespan_seconds,
        {f"{share:.0%}": batch_at(samples, share * makespan_seconds) for share in BATCH_MOMENTS},
    )
