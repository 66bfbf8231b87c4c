"""The shared dispatchers when a worker is lost, and their re-prefill accounting; torch-free."""

from __future__ import annotations

import numpy as np
import pytest

from specroll.scheduling.context_aware import FifoOrder
from specroll.scheduling.dispatch import DividedDispatch, StaticDispatch
from specroll.scheduling.divided import ChunkPolicy


class Slots:
    """A worker as the dispatchers see it, recording what they add."""

    def __init__(self, index: int, kv_capacity: float = 1e9, max_num_seqs: int = 100):
        self.index, self.kv_capacity, self.max_num_seqs = index, kv_capacity, max_num_seqs
        self.added: list[tuple[int, float, float, float]] = []  # request, position, stop, prefill tokens

    @property
    def num_running(self) -> int:
        return len(self.added)

    def context_tokens(self) -> float:
        return sum(10 + position for _, position, _, _ in self.added)

    def reserved_tokens(self) -> float:
        return sum(10 + stop for _, _, stop, _ in self.added)

    def add(self, request_id, drafter, position, stop, prefill_tokens):
        self.added.append((request_id, position, stop, prefill_tokens))


def fill(dispatcher, workers):
    dispatcher.fill(workers, lambda i: workers[i], range(len(workers)))


def test_static_dispatch_gives_a_lost_workers_requests_to_the_live_ones():
    groups = np.repeat(np.arange(4), 2)
    dispatcher = StaticDispatch(np.full(8, 50.0), groups, 3, 10, np.random.default_rng(0))
    workers = [Slots(i, max_num_seqs=1) for i in range(3)]
    fill(dispatcher, workers)
    still_running = {workers[0].added[0][0], workers[2].added[0][0]}
    lost = workers[1].added[0][0]
    dispatcher.on_lost(1, [(lost, 7.0)])
    workers = [Slots(i) for i in range(3)]
    fill(dispatcher, workers)
    assert workers[1].added == []
    added = {a[0]: a for w in workers for a in w.added}
    assert set(added) == set(range(8)) - still_running  # the lost worker's queue moved too
    assert added[lost][1] == 7.0 and added[lost][3] == 17  # resumed, re-prefilled
    assert dispatcher.num_reprefills == 1 and dispatcher.reprefill_tokens == 17
    assert not dispatcher.has_pending()


def test_divided_dispatch_requeues_a_lost_workers_chunks_and_never_picks_it_again():
    dispatcher = DividedDispatch(np.full(4, 40.0), FifoOrder(), ChunkPolicy(8), 10, 40, resume_prefill=True)
    workers = [Slots(i, max_num_seqs=2) for i in range(2)]
    fill(dispatcher, workers)
    assert [a[0] for a in workers[0].added] == [0, 2] and [a[0] for a in workers[1].added] == [1, 3]
    dispatcher.on_lost(1, [(1, 5.0), (3, 0.0)])
    dispatcher.on_stop(workers[0], 0, 8.0)  # worker 0's chunks end: they hold their slots and go on
    dispatcher.on_stop(workers[0], 2, 8.0)
    workers = [Slots(0), Slots(1)]
    dispatcher.fill(workers, lambda i: workers[i], [0, 1])
    assert workers[1].added == []  # lost: it takes nothing more
    assert {a[0]: a[1:] for a in workers[0].added} == {0: (8.0, 16.0, 0.0), 2: (8.0, 16.0, 0.0)}
    assert dispatcher.has_pending()  # 1 and 3 wait: worker 0 runs two at most
    dispatcher.on_finished(0, 9)
    dispatcher.on_finished(2, 9)
    workers = [Slots(0), Slots(1)]
    dispatcher.fill(workers, lambda i: workers[i], [0])
    assert {a[0]: a[1:3] for a in workers[0].added} == {
        1: (5.0, 13.0),
        3: (0.0, 8.0),
    }  # from where they stood
    assert dispatcher.num_reprefills == 1 and dispatcher.reprefill_tokens == 10 + 5


def test_a_chunk_resumed_through_seers_kv_pool_pays_no_prefill():
    dispatcher = DividedDispatch(np.full(2, 40.0), FifoOrder(), ChunkPolicy(8), 10, 40)
    workers = [Slots(0)]
    fill(dispatcher, workers)
    dispatcher.on_stop(workers[0], 0, 8.0)
    workers[0].added.clear()
    fill(dispatcher, workers)
    assert workers[0].added == [(0, 8.0, 16.0, 0.0)] and dispatcher.num_reprefills == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: StaticDispatch(np.full(2, 9.0), np.array([0, 1]), 2, 1, np.random.default_rng(0)),
        lambda: DividedDispatch(np.full(2, 9.0), FifoOrder(), ChunkPolicy(4), 1, 9),
    ],
)
def test_losing_every_worker_is_an_error(make):
    dispatcher = make()
    workers = [Slots(0), Slots(1)]
    fill(dispatcher, workers)
    dispatcher.on_lost(0, [])
    with pytest.raises(RuntimeError, match="every worker is lost"):
        dispatcher.on_lost(1, [])


def test_a_chunk_on_the_worker_that_ran_the_last_one_keeps_its_cache():
    dispatcher = DividedDispatch(np.full(1, 40.0), FifoOrder(), ChunkPolicy(8), 10, 40, resume_prefill=True)
    workers = [Slots(0), Slots(1)]
    fill(dispatcher, workers)
    assert workers[0].added == [(0, 0.0, 8.0, 10)]  # the prompt's prefill
    dispatcher.on_stop(workers[0], 0, 8.0)
    workers = [Slots(0), Slots(1)]
    fill(dispatcher, workers)  # both idle: the least loaded, ties to worker 0, where its cache is
    assert workers[0].added == [(0, 8.0, 16.0, 0.0)] and dispatcher.num_reprefills == 0
    dispatcher.on_stop(workers[0], 0, 16.0)
    workers = [Slots(0), Slots(1)]
    workers[0].add(9, 0, 0.0, 40.0, 0.0)  # worker 0 is busier now: the chunk moves and re-prefills
    fill(dispatcher, workers)
    assert workers[1].added == [(0, 16.0, 24.0, 26)]
    assert dispatcher.num_reprefills == 1 and dispatcher.reprefill_tokens == 26


def test_copies_go_to_free_workers_lowest_acceptance_first():
    """The coordinator's Fastest-of-N: the simulator's algorithm over a ladder of one rung, a copy."""
    from specroll.scheduling.fastest_of_n import COPY_LADDER, FonCandidate, assign_fastest_of_n

    stragglers = [
        FonCandidate(0, 0.9, 50),
        FonCandidate(1, 0.2, 10),
        FonCandidate(2, 0.2, 30),
        FonCandidate(3, 0.5, 5),
    ]
    copies = assign_fastest_of_n(stragglers, COPY_LADDER, [4, 2], {}, max_batch=1)
    assert [(c.request_id, c.worker) for c in copies] == [(2, 2), (1, 4)]  # the longer at 0.2 first
    copies = assign_fastest_of_n(stragglers, COPY_LADDER, [4, 2], {}, max_batch=2)
    assert [(c.request_id, c.worker) for c in copies] == [(2, 2), (1, 4), (3, 2), (0, 4)]  # least loaded
    holding = [FonCandidate(1, 0.2, 10, frozenset(COPY_LADDER)), FonCandidate(3, 0.5, 5)]
    assert [c.request_id for c in assign_fastest_of_n(holding, COPY_LADDER, [4], {}, max_batch=2)] == [3]


def test_a_chunk_with_no_better_worker_goes_on_where_it_runs_ahead_of_the_buffer():
    dispatcher = DividedDispatch(np.full(3, 40.0), FifoOrder(), ChunkPolicy(8), 10, 40, resume_prefill=True)
    workers = [Slots(0, max_num_seqs=1), Slots(1, max_num_seqs=1)]
    fill(dispatcher, workers)  # requests 0 and 1 run; request 2 waits in the buffer
    dispatcher.on_stop(workers[0], 0, 8.0)
    workers[0].added.clear()
    dispatcher.fill(workers, lambda i: workers[i], [0])
    assert workers[0].added == [(0, 8.0, 16.0, 0.0)]  # it holds its slot: request 2 still waits
    assert dispatcher.has_pending() and dispatcher.num_reprefills == 0
