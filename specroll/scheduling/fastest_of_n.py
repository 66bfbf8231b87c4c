"""SpecActor's greedy Fastest-of-N assignment (§4.2, Algorithm 3), for the simulator and the cluster.

When workers free up, the unfinished requests with the lowest acceptance get extra drafters, best
drafter-ladder rank first, each on the least-loaded free worker serving that drafter (or on a free
worker serving none yet). The request finishes when its fastest copy does. Draft-first: a request
receives every drafter it can before the next request is considered.

The simulator's workers hold a ladder of drafters (`specroll.sim`); specroll's engines all draft
alike (`specroll.cluster`), so there a copy is the request's own drafting on one more worker: the
ladder is `COPY_LADDER`, one rung that a request holds once it has a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

COPY_LADDER = (0,)  # workers that all draft alike: the one extra drafter is a copy on another worker


@dataclass(frozen=True)
class FonCandidate:
    request_id: int
    acceptance: float  # observed acceptance rate of its current drafter (0 where it drafted nothing)
    num_generated: int  # output tokens so far: among equal acceptance, the longest is likely the tail's
    drafters: frozenset[int] = frozenset()  # ladder rungs already running for it on other copies


@dataclass(frozen=True)
class FonAssignment:
    request_id: int
    drafter: int
    worker: int


def straggler_order(candidates: Sequence[FonCandidate]) -> list[FonCandidate]:
    """Lowest acceptance first, then the longest so far, then the lowest id."""
    return sorted(candidates, key=lambda c: (c.acceptance, -c.num_generated, c.request_id))


def assign_fastest_of_n(
    candidates: Sequence[FonCandidate],
    ladder: Sequence[int],  # drafter indices, best rank first
    free_workers: Sequence[int],  # workers running nothing: none of them runs a candidate already
    worker_drafter: dict[int, int],  # free worker -> the drafter it already serves
    max_batch: int,  # b_max
) -> list[FonAssignment]:
    load = {worker: 0 for worker in free_workers}
    serving = {w: worker_drafter[w] for w in free_workers if w in worker_drafter}
    assignments: list[FonAssignment] = []
    for candidate in straggler_order(candidates):
        for drafter in ladder:
            if drafter in candidate.drafters:
                continue
            worker = _min_load_worker(load, serving, drafter, max_batch)
            if worker is None:
                continue
            serving[worker] = drafter
            load[worker] += 1
            assignments.append(FonAssignment(candidate.request_id, drafter, worker))
    return assignments


def _min_load_worker(
    load: dict[int, int], serving: dict[int, int], drafter: int, max_batch: int
) -> int | None:
    """GetMinLoadWorker(W_d, b_max) over workers serving this drafter or none yet."""
    eligible = [w for w, n in load.items() if n < max_batch and serving.get(w, drafter) == drafter]
    return min(eligible, key=lambda w: (load[w], w)) if eligible else None
