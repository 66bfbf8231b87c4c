"""Seer's divided rollout (§4.2): requests run in chunks and each chunk goes to the least-loaded worker.

A request is dispatched with max_tokens set to a chunk (e.g. 8K tokens); when the chunk ends it
returns to the request buffer and is dispatched again, possibly elsewhere (the global KV-cache pool
makes the move cheap). A worker takes a chunk only if its KV budget can hold the chunk in full,
so divided rollout never preempts.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChunkPolicy:
    chunk_size: int  # tokens a request may generate before it returns to the buffer

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be positive")

    def chunk_end(self, num_generated: int, max_tokens: int) -> int:
        """Output position at which this dispatch stops (Seer Algorithm 1, lines 19-20)."""
        return min(num_generated + self.chunk_size, max_tokens)


def select_instance(
    kv_reserved: np.ndarray,  # (num_workers,) KV tokens already promised to running chunks
    num_running: np.ndarray,  # (num_workers,) requests running on each worker
    kv_capacity: float,
    max_num_seqs: int,
    need_tokens: float,
) -> int | None:
    """Least-loaded worker (by KV reservation) that can hold need_tokens more; None if none can."""
    fits = (kv_reserved + need_tokens <= kv_capacity) & (num_running < max_num_seqs)
    if not fits.any():
        return None
    load = np.where(fits, kv_reserved, np.inf)
    return int(np.argmin(load))


class WorkerLoads:
    """select_instance in O(log W): a heap of (KV reserved, worker) with stale entries skipped.

    The least-reserved worker is also the one with the most free KV, so if it cannot hold the chunk
    no worker can. Workers at max_num_seqs leave the heap until a request leaves them.
    """

    def __init__(self, num_workers: int, kv_capacity: float, max_num_seqs: int) -> None:
        self.kv_capacity, self.max_num_seqs = kv_capacity, max_num_seqs
        self.reserved = np.zeros(num_workers)
        self.running = np.zeros(num_workers, dtype=np.int64)
        self._stamp = np.zeros(num_workers, dtype=np.int64)
        self._heap: list[tuple[float, int, int]] = []  # (reserved, worker, stamp)
        for index in range(num_workers):
            self.update(index, 0.0, 0)

    def update(self, index: int, reserved: float, running: int) -> None:
        self.reserved[index], self.running[index] = reserved, running
        self._stamp[index] += 1
        if running < self.max_num_seqs:
            heapq.heappush(self._heap, (reserved, index, int(self._stamp[index])))

    def close(self, index: int) -> None:
        """The worker takes nothing more (it is lost): its heap entries go stale for good."""
        self.running[index] = self.max_num_seqs
        self._stamp[index] += 1

    def add(self, index: int, need_tokens: float) -> None:
        self.update(index, self.reserved[index] + need_tokens, int(self.running[index]) + 1)

    def select(self, need_tokens: float) -> int | None:
        """Same answer as select_instance on (reserved, running), ties to the lowest index."""
        while self._heap and self._heap[0][2] != self._stamp[self._heap[0][1]]:
            heapq.heappop(self._heap)
        if not self._heap or self._heap[0][0] + need_tokens > self.kv_capacity:
            return None
        return self._heap[0][1]
