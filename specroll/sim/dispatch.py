"""Where requests run: veRL's static per-worker queues or Seer's divided rollout over a global buffer.

A dispatcher owns the requests that are not running. The loop tells it when requests finish, end a
chunk or are preempted, and asks it to fill workers; it asks the loop to `touch` a worker (bring it
to the current time) before adding to it.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Protocol, Sequence

import numpy as np

from specroll.scheduling.context_aware import RequestOrder
from specroll.scheduling.divided import ChunkPolicy, WorkerLoads
from specroll.scheduling.static import assign_groups
from specroll.sim.cost_model import ForwardCost
from specroll.sim.worker import Worker

ADMIT_FRACTION = 0.90  # admit while the KV cache stays below this share after admission
PREEMPT_TO_FRACTION = 0.95  # on overflow, preempt until the cache is below this share (hysteresis)


class Dispatcher(Protocol):
    is_growing_kv: bool  # True: workers may outgrow their KV cache and preempt

    def fill(self, workers: Sequence[Worker], touch: Callable[[int], Worker], changed: Sequence[int]) -> None: ...
    def on_stop(self, worker: Worker, request_id: int, position: float) -> None: ...
    def on_preempted(self, worker: Worker, request_id: int, position: float) -> None: ...
    def on_finished(self, request_id: int, length: int) -> None: ...
    def has_pending(self) -> bool: ...


class StaticDispatch:
    """veRL: groups assigned to workers up front; each worker runs its own queue (vLLM-style).

    A worker admits queued requests while its KV cache has room and, when running requests outgrow
    it, preempts the most recently admitted one, which later re-runs its prefill (vLLM recompute).
    """

    is_growing_kv = True

    def __init__(self, lengths: np.ndarray, group_ids: np.ndarray, num_workers: int, cost: ForwardCost,
                 prompt_tokens: int, rng: np.random.Generator):
        self._lengths = lengths
        owner = assign_groups(int(group_ids.max()) + 1, num_workers, rng)[group_ids]
        self._queues = [deque(np.flatnonzero(owner == w).tolist()) for w in range(num_workers)]
        self._resume_at: dict[int, float] = {}
        self._cost = cost
        self._prompt_tokens = prompt_tokens
        self.num_preemptions = 0

    def fill(self, workers: Sequence[Worker], touch: Callable[[int], Worker], changed: Sequence[int]) -> None:
        """Only workers whose batch changed can admit: the others' queues wait on their own KV."""
        for index in changed:
            queue = self._queues[index]
            if queue and self._can_admit(workers[index], queue[0]):
                self._admit(touch(index), queue)

    def _can_admit(self, worker: Worker, request_id: int) -> bool:
        need = self._prompt_tokens + self._resume_at.get(request_id, 0.0)
        room = worker.context_tokens() + need <= ADMIT_FRACTION * worker.kv_capacity
        return room and worker.num_running < worker.max_num_seqs

    def _admit(self, worker: Worker, queue: deque) -> None:
        while queue and self._can_admit(worker, queue[0]):
            request_id = queue.popleft()
            position = self._resume_at.pop(request_id, 0.0)
            prefill = self._cost.prefill_seconds(self._prompt_tokens + position)
            worker.add(request_id, 0, position, float(self._lengths[request_id]), prefill)

    def on_stop(self, worker: Worker, request_id: int, position: float) -> None:
        raise RuntimeError("static dispatch has no chunks")

    def on_preempted(self, worker: Worker, request_id: int, position: float) -> None:
        self.num_preemptions += 1
        self._resume_at[request_id] = position
        self._queues[worker.index].appendleft(request_id)

    def on_finished(self, request_id: int, length: int) -> None:
        pass

    def has_pending(self) -> bool:
        return any(self._queues)


class DividedDispatch:
    """Seer §4.2: chunks from a global buffer, each to the least-loaded worker whose KV budget holds it.

    Chunks move between workers through the global KV-cache pool without recomputation (Seer §5:
    the pool prefetches to the target instance), so only a request's first dispatch pays a prefill.
    """

    is_growing_kv = False

    def __init__(self, lengths: np.ndarray, order: RequestOrder, chunks: ChunkPolicy, cost: ForwardCost,
                 prompt_tokens: int, max_tokens: int):
        self._lengths = lengths
        self._order = order
        self._chunks = chunks
        self._cost = cost
        self._prompt_tokens = prompt_tokens
        self._max_tokens = max_tokens
        self._position = np.zeros(len(lengths))
        self._loads: WorkerLoads | None = None
        for request_id in range(len(lengths)):
            order.push(request_id, 0)
        self.num_preemptions = 0

    def fill(self, workers: Sequence[Worker], touch: Callable[[int], Worker], changed: Sequence[int]) -> None:
        """Refresh the loads of workers whose batch changed, then dispatch chunks while one fits."""
        if self._loads is None:
            self._loads = WorkerLoads(len(workers), workers[0].kv_capacity, workers[0].max_num_seqs)
        for index in changed:
            self._loads.update(index, workers[index].reserved_tokens(), workers[index].num_running)
        while len(self._order):
            request_id = self._order.pop()
            position = self._position[request_id]
            stop = min(self._chunks.chunk_end(int(position), self._max_tokens), self._lengths[request_id])
            need = self._prompt_tokens + stop
            index = self._loads.select(need)
            if index is None:
                self._order.requeue(request_id, int(position))
                return
            prefill = self._cost.prefill_seconds(self._prompt_tokens) if position == 0 else 0.0
            touch(index).add(request_id, 0, position, float(stop), prefill)
            self._loads.add(index, need)

    def on_stop(self, worker: Worker, request_id: int, position: float) -> None:
        self._order.on_progress(request_id, int(position - self._position[request_id]))
        self._position[request_id] = position
        self._order.push(request_id, int(position))

    def on_preempted(self, worker: Worker, request_id: int, position: float) -> None:
        raise RuntimeError("divided rollout reserves KV for whole chunks and never preempts")

    def on_finished(self, request_id: int, length: int) -> None:
        self._order.on_progress(request_id, int(length - self._position[request_id]))
        self._order.on_finished(request_id, length)

    def has_pending(self) -> bool:
        return len(self._order) > 0
