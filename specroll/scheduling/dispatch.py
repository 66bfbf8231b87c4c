"""Where requests run: veRL's static per-worker queues or Seer's divided rollout over a global buffer.

A dispatcher owns the requests that are not running. Its caller tells it when requests finish, end a
chunk, are preempted or are lost with a worker, and asks it to fill workers; it asks the caller to
`touch` a worker (bring it to the current time) before adding to it. The same dispatchers decide for
the simulator's workers (`specroll.sim`) and for real engines on Ray (`specroll.cluster`): both give
workers the `WorkerSlots` shape.

A request's dispatch names the output position it may run to (`stop`): its length where the caller
knows it (the simulator), else max_tokens; a real worker also stops a request when it finishes. It also
names the context the worker must compute before the request decodes (`prefill_tokens`: the prompt and
any tokens generated elsewhere, 0 where the request's cache is on that worker); the worker pays for it,
in its own prefill forwards, as a real engine does.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Protocol, Sequence

import numpy as np

from specroll.scheduling.context_aware import RequestOrder
from specroll.scheduling.divided import ChunkPolicy, WorkerLoads
from specroll.scheduling.static import assign_groups

DISPATCHES = ("static", "divided", "context-aware")  # StaticDispatch; DividedDispatch, FIFO or context-aware
ADMIT_FRACTION = 0.90  # admit while the KV cache stays below this share after admission
PREEMPT_TO_FRACTION = 0.95  # on overflow, preempt until the cache is below this share (hysteresis)


class WorkerSlots(Protocol):
    """What a dispatcher reads and does on one worker."""

    index: int
    kv_capacity: float
    max_num_seqs: int

    @property
    def num_running(self) -> int: ...
    def context_tokens(self) -> float: ...
    def reserved_tokens(self) -> float: ...
    def add(
        self, request_id: int, drafter: int, position: float, stop: float, prefill_tokens: float
    ) -> None: ...


Touch = Callable[[int], WorkerSlots]


class Dispatcher(Protocol):
    is_growing_kv: bool  # True: workers may outgrow their KV cache and preempt
    num_preemptions: int
    num_reprefills: int  # dispatches that recomputed a request's generated context
    reprefill_tokens: float  # context tokens those re-prefills recomputed

    def fill(self, workers: Sequence[WorkerSlots], touch: Touch, changed: Sequence[int]) -> None: ...
    def on_stop(self, worker: WorkerSlots, request_id: int, position: float) -> None: ...
    def on_preempted(self, worker: WorkerSlots, request_id: int, position: float) -> None: ...
    def on_finished(self, request_id: int, length: int) -> None: ...
    def on_lost(self, worker_index: int, running: Sequence[tuple[int, float]]) -> None: ...
    def has_pending(self) -> bool: ...


def dense_ids(ids: Sequence[int]) -> np.ndarray:
    """Ids (e.g. prompt ids) renumbered 0..G-1 in order of first appearance: dispatchers index by them."""
    index: dict[int, int] = {}
    return np.array([index.setdefault(i, len(index)) for i in ids], dtype=np.int64)


def _per_request(prompt_tokens: int | Sequence[int] | np.ndarray, num_requests: int) -> np.ndarray:
    """Prompt tokens per request: one figure for all (the simulator) or each request's own."""
    values = np.broadcast_to(np.asarray(prompt_tokens, dtype=np.float64), (num_requests,)).copy()
    if (values < 0).any():
        raise ValueError("prompt token counts must be non-negative")
    return values


class StaticDispatch:
    """veRL: groups assigned to workers up front; each worker runs its own queue (vLLM-style).

    A worker admits queued requests while its KV cache has room and, when running requests outgrow
    it, preempts the most recently admitted one, which later re-runs its prefill (vLLM recompute).
    A lost worker's requests, running and queued, join the shortest queues of the live workers.
    """

    is_growing_kv = True

    def __init__(
        self,
        lengths: np.ndarray,
        group_ids: np.ndarray,
        num_workers: int,
        prompt_tokens: int | np.ndarray,
        rng: np.random.Generator,
    ):
        self._lengths = lengths
        owner = assign_groups(int(group_ids.max()) + 1, num_workers, rng)[group_ids]
        self._queues = [deque(np.flatnonzero(owner == w).tolist()) for w in range(num_workers)]
        self._live = set(range(num_workers))
        self._resume_at: dict[int, float] = {}
        self._prompt = _per_request(prompt_tokens, len(lengths))
        self.num_preemptions = 0
        self.num_reprefills = 0
        self.reprefill_tokens = 0.0

    def fill(self, workers: Sequence[WorkerSlots], touch: Touch, changed: Sequence[int]) -> None:
        """Only workers whose batch changed can admit: the others' queues wait on their own KV."""
        for index in changed:
            queue = self._queues[index]
            if index in self._live and queue and self._can_admit(workers[index], queue[0]):
                self._admit(touch(index), queue)

    def _can_admit(self, worker: WorkerSlots, request_id: int) -> bool:
        need = self._prompt[request_id] + self._resume_at.get(request_id, 0.0)
        room = worker.context_tokens() + need <= ADMIT_FRACTION * worker.kv_capacity
        return room and worker.num_running < worker.max_num_seqs

    def _admit(self, worker: WorkerSlots, queue: deque) -> None:
        while queue and self._can_admit(worker, queue[0]):
            request_id = queue.popleft()
            position = self._resume_at.pop(request_id, 0.0)
            prefill = self._prompt[request_id] + position
            if position > 0:  # a preempted or orphaned request recomputes what it generated
                self.num_reprefills += 1
                self.reprefill_tokens += prefill
            worker.add(request_id, 0, position, float(self._lengths[request_id]), prefill)

    def on_stop(self, worker: WorkerSlots, request_id: int, position: float) -> None:
        raise RuntimeError("static dispatch has no chunks")

    def on_preempted(self, worker: WorkerSlots, request_id: int, position: float) -> None:
        self.num_preemptions += 1
        self._resume_at[request_id] = position
        self._queues[worker.index].appendleft(request_id)

    def on_finished(self, request_id: int, length: int) -> None:
        pass

    def on_lost(self, worker_index: int, running: Sequence[tuple[int, float]]) -> None:
        """The worker is gone: its running requests (at their last known positions) and its queue
        move to the live workers, each to the shortest queue."""
        self._live.discard(worker_index)
        if not self._live:
            raise RuntimeError("every worker is lost")
        orphans = [*running, *((r, self._resume_at.get(r, 0.0)) for r in self._queues[worker_index])]
        self._queues[worker_index].clear()
        for request_id, position in orphans:
            target = min(self._live, key=lambda w: (len(self._queues[w]), w))
            self._resume_at[request_id] = position
            self._queues[target].append(request_id)

    def has_pending(self) -> bool:
        return any(self._queues[w] for w in self._live)


class DividedDispatch:
    """Seer §4.2: chunks from a global buffer, each to the least-loaded worker whose KV budget holds it.

    `resume_prefill` says where a chunk after the first goes and what it costs.
    False (Seer's own setting): back to the buffer, in the order's turn, at no cost, since Seer's
    global KV-cache pool prefetches a request's cache to whichever instance takes it next (Seer §5).
    True (workers without a shared KV pool, such as specroll's engines on Ray): a request at its
    chunk's end holds its cache and its slot, so it does not wait in the buffer: it moves to the
    least-loaded worker if that worker has room and less KV reserved than its own (paying a prefill of
    the prompt and every token generated so far, counted here), and otherwise goes on where it is, at
    no cost. The buffer's order then serves new requests and those of lost workers.
    """

    is_growing_kv = False

    def __init__(
        self,
        lengths: np.ndarray,
        order: RequestOrder,
        chunks: ChunkPolicy,
        prompt_tokens: int | np.ndarray,
        max_tokens: int,
        resume_prefill: bool = False,
    ):
        self._lengths = lengths
        self._order = order
        self._chunks = chunks
        self._prompt = _per_request(prompt_tokens, len(lengths))
        self._max_tokens = max_tokens
        self._resume_prefill = resume_prefill
        self._position = np.zeros(len(lengths))
        self._last_worker = np.full(len(lengths), -1)  # where each request's cache is, if anywhere
        self._ended: list[tuple[int, int]] = []  # (request, worker) whose chunk ended, holding its cache
        self._loads: WorkerLoads | None = None
        self._lost: set[int] = set()
        for request_id in range(len(lengths)):
            order.push(request_id, 0)
        self.num_preemptions = 0
        self.num_reprefills = 0
        self.reprefill_tokens = 0.0

    def fill(self, workers: Sequence[WorkerSlots], touch: Touch, changed: Sequence[int]) -> None:
        """Refresh the loads of workers whose batch changed, place the chunks that just ended, then
        dispatch chunks from the buffer while one fits."""
        if self._loads is None:
            self._loads = WorkerLoads(len(workers), workers[0].kv_capacity, workers[0].max_num_seqs)
            for index in self._lost:
                self._loads.close(index)
        for index in changed:
            if index not in self._lost:
                self._loads.update(index, workers[index].reserved_tokens(), workers[index].num_running)
        for request_id, worker in self._ended:
            self._place_next_chunk(request_id, worker, touch)
        self._ended.clear()
        while len(self._order):
            if not self._dispatch_next(touch):
                break

    def _place_next_chunk(self, request_id: int, worker: int, touch: Touch) -> None:
        """Move to the least-loaded worker if it has room and less reserved than here; else stay."""
        stop, need = self._next_chunk(request_id)
        best = self._loads.select(need)
        moves = (
            best is not None and best != worker and self._loads.reserved[best] < self._loads.reserved[worker]
        )
        self._give(request_id, best if moves else worker, stop, need, touch)

    def _next_chunk(self, request_id: int) -> tuple[float, float]:
        stop = min(
            self._chunks.chunk_end(int(self._position[request_id]), self._max_tokens),
            self._lengths[request_id],
        )
        return float(stop), self._prompt[request_id] + stop

    def _dispatch_next(self, touch: Touch) -> bool:
        """Pop the next request and give its chunk to the least-loaded worker; False if none fits."""
        request_id = self._order.pop()
        stop, need = self._next_chunk(request_id)
        index = self._loads.select(need)
        if index is None:
            self._order.requeue(request_id, int(self._position[request_id]))
            return False
        self._give(request_id, index, stop, need, touch)
        return True

    def _give(self, request_id: int, index: int, stop: float, need: float, touch: Touch) -> None:
        position = self._position[request_id]
        touch(index).add(request_id, 0, position, stop, self._prefill_tokens(request_id, position, index))
        self._last_worker[request_id] = index
        self._loads.add(index, need)

    def _prefill_tokens(self, request_id: int, position: float, worker: int) -> float:
        if position == 0:
            return float(self._prompt[request_id])
        if not self._resume_prefill or self._last_worker[request_id] == worker:
            return 0.0
        self.num_reprefills += 1
        self.reprefill_tokens += self._prompt[request_id] + position
        return float(self._prompt[request_id] + position)

    def on_stop(self, worker: WorkerSlots, request_id: int, position: float) -> None:
        self._order.on_progress(request_id, int(position - self._position[request_id]))
        self._position[request_id] = position
        if self._resume_prefill and worker.index not in self._lost:
            self._ended.append((request_id, worker.index))
        else:
            self._order.push(request_id, int(position))

    def on_preempted(self, worker: WorkerSlots, request_id: int, position: float) -> None:
        raise RuntimeError("divided rollout reserves KV for whole chunks and never preempts")

    def on_finished(self, request_id: int, length: int) -> None:
        self._order.on_progress(request_id, int(length - self._position[request_id]))
        self._order.on_finished(request_id, length)

    def on_lost(self, worker_index: int, running: Sequence[tuple[int, float]]) -> None:
        """The worker is gone: it takes no more chunks, and its running chunks go back to the
        buffer from their last known positions, without a cache anywhere."""
        self._lost.add(worker_index)
        if self._loads is not None:
            self._loads.close(worker_index)
        if self._loads is not None and len(self._lost) == len(self._loads.reserved):
            raise RuntimeError("every worker is lost")
        for request_id, position in running:
            self._last_worker[request_id] = -1
            self._order.on_progress(request_id, int(position - self._position[request_id]))
            self._position[request_id] = position
            self._order.push(request_id, int(position))

    def has_pending(self) -> bool:
        return len(self._order) > 0


def make_dispatcher(
    name: str,
    lengths: np.ndarray,
    group_ids: np.ndarray,
    prompt_tokens: int | np.ndarray,
    num_workers: int,
    chunk_size: int,
    max_tokens: int,
    seed: int = 0,
    resume_prefill: bool = True,
) -> Dispatcher:
    """The dispatcher `name` (one of DISPATCHES) over requests 0..n-1 with dense group ids."""
    from specroll.scheduling.context_aware import ContextAwareOrder, FifoOrder

    if name not in DISPATCHES:
        raise ValueError(f"dispatch must be one of {', '.join(DISPATCHES)}, got {name!r}")
    if name == "static":
        return StaticDispatch(lengths, group_ids, num_workers, prompt_tokens, np.random.default_rng(seed))
    order = ContextAwareOrder(group_ids, max_tokens) if name == "context-aware" else FifoOrder()
    return DividedDispatch(lengths, order, ChunkPolicy(chunk_size), prompt_tokens, max_tokens, resume_prefill)
