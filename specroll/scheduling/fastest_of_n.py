"""SpecActor's greedy Fastest-of-N assignment (§4.2, Algorithm 3).

When workers free up, the unfinished requests with the lowest acceptance get extra drafters, best
drafter-ladder rank first, each on the least-loaded free worker serving that drafter (or on a free
worker serving none yet). The request finishes when its fastest copy does. Draft-first: a request
receives every drafter it can before the next request is considered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class FonCandidate:
    request_id: int
    acceptance: float  # observed acceptance rate of its current drafter
    drafters: frozenset[int]  # drafter indices already running for it


@dataclass(frozen=True)
class FonAssignment:
    request_id: int
    drafter: int
    worker: int


def assign_fastest_of_n(
    candidates: Sequence[FonCandidate],
    ladder: Sequence[int],  # drafter indices, best rank first
    free_workers: Sequence[int],
    worker_drafter: dict[int, int],  # free worker -> the drafter it already serves
    max_batch: int,  # b_max
) -> list[FonAssignment]:
    load = {worker: 0 for worker in free_workers}
    serving = {w: worker_drafter[w] for w in free_workers if w in worker_drafter}
    assignments: list[FonAssignment] = []
    for candidate in sorted(candidates, key=lambda c: c.acceptance):
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


def _min_load_worker(load: dict[int, int], serving: dict[int, int], drafter: int, max_batch: int) -> int | None:
    """GetMinLoadWorker(W_d, b_max) over workers serving this drafter or none yet."""
    eligible = [w for w, n in load.items() if n < max_batch and serving.get(w, drafter) == drafter]
    return min(eligible, key=lambda w: (load[w], w)) if eligible else None


@dataclass(frozen=True)
class Straggler:
    request_id: int
    acceptance: float  # accepted per drafted token so far (0 where it drafted nothing)
    num_generated: int
    worker: int  # where it runs


def assign_copies(stragglers: Sequence[Straggler], free_workers: Sequence[int], max_batch: int) -> list[FonAssignment]:
    """Fastest-of-N where every worker serves one drafter: a copy of each straggler on a free worker,
    lowest acceptance first (then the longest so far, likely the tail's), spread to the least-loaded
    free worker, at most `max_batch` a worker. The request ends when its first copy does."""
    load = {worker: 0 for worker in free_workers}
    assignments: list[FonAssignment] = []
    for straggler in sorted(stragglers, key=lambda s: (s.acceptance, -s.num_generated, s.request_id)):
        eligible = [w for w, n in load.items() if n < max_batch and w != straggler.worker]
        if not eligible:
            continue
        worker = min(eligible, key=lambda w: (load[w], w))
        load[worker] += 1
        assignments.append(FonAssignment(straggler.request_id, 0, worker))
    return assignments
