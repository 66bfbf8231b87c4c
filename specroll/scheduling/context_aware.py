"""Orders of the request buffer under divided rollout: FIFO and Seer's context-aware order.

Seer §4.3, Algorithm 1: the first request of every group is a *probe* (the paper's speculative
request). Probes are served first, shortest-generated first (SFS), so short groups finish early and
reveal their lengths. The other requests are served longest-first (LFS) by the group's estimated
length: the longest finished sibling so far, or max_tokens while no sibling has finished. Ties go to
the group that has received the least execution, which spreads work across unknown groups.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Protocol, Sequence

import numpy as np


class RequestOrder(Protocol):
    """Which buffered request a free worker should run next."""

    def push(self, request_id: int, num_generated: int) -> None: ...
    def pop(self) -> int | None: ...
    def requeue(self, request_id: int, num_generated: int) -> None: ...
    def on_progress(self, request_id: int, num_tokens: int) -> None: ...
    def on_finished(self, request_id: int, length: int) -> None: ...
    def __len__(self) -> int: ...


class FifoOrder:
    """First come, first served; a chunk that ends goes to the back (Seer's No-Context, §6.4.1)."""

    def __init__(self) -> None:
        self._queue: deque[int] = deque()

    def push(self, request_id: int, num_generated: int) -> None:
        self._queue.append(request_id)

    def pop(self) -> int | None:
        return self._queue.popleft() if self._queue else None

    def requeue(self, request_id: int, num_generated: int) -> None:
        """Undo a pop that found no worker: back to the front."""
        self._queue.appendleft(request_id)

    def on_progress(self, request_id: int, num_tokens: int) -> None:
        pass

    def on_finished(self, request_id: int, length: int) -> None:
        pass

    def __len__(self) -> int:
        return len(self._queue)


class ContextAwareOrder:
    """Seer Algorithm 1's choice of r*: probes by SFS, then the rest by LFS on estimated group length."""

    def __init__(self, group_ids: Sequence[int], max_tokens: int) -> None:
        self._group_of = np.asarray(group_ids, dtype=np.int64)
        num_groups = int(self._group_of.max()) + 1
        first = np.full(num_groups, -1, dtype=np.int64)
        for request_id in range(len(self._group_of) - 1, -1, -1):
            first[self._group_of[request_id]] = request_id
        self._probe_of = first
        self._estimate = np.full(num_groups, float(max_tokens))  # L_g hat
        self._executed = np.zeros(num_groups)  # tokens generated so far by the group
        self._waiting: list[deque[int]] = [deque() for _ in range(num_groups)]
        self._num_waiting = np.zeros(num_groups, dtype=np.int64)
        self._num_finished = np.zeros(num_groups, dtype=np.int64)
        self._probes: list[tuple[int, int]] = []  # heap of (num_generated, request_id)
        self._groups: list[tuple[float, float, int, int]] = []  # heap of (-L_g hat, executed, group, stamp)
        self._stamp = np.zeros(num_groups, dtype=np.int64)
        self._size = 0

    def is_probe(self, request_id: int) -> bool:
        return bool(self._probe_of[self._group_of[request_id]] == request_id)

    def push(self, request_id: int, num_generated: int) -> None:
        self._size += 1
        if self.is_probe(request_id):
            heapq.heappush(self._probes, (num_generated, request_id))
            return
        group = self._group_of[request_id]
        self._waiting[group].append(request_id)
        self._num_waiting[group] += 1
        self._reprioritise(group)

    def pop(self) -> int | None:
        if self._probes:
            self._size -= 1
            return heapq.heappop(self._probes)[1]
        if self._size == 0:
            return None
        group = self._longest_waiting_group()
        self._num_waiting[group] -= 1
        self._size -= 1
        return self._waiting[group].popleft()

    def requeue(self, request_id: int, num_generated: int) -> None:
        """Undo a pop that found no worker: the request keeps its priority."""
        if self.is_probe(request_id):
            self.push(request_id, num_generated)
            return
        group = self._group_of[request_id]
        self._waiting[group].appendleft(request_id)
        self._num_waiting[group] += 1
        self._size += 1
        self._reprioritise(group)

    def _longest_waiting_group(self) -> int:
        """Highest estimate, then least executed, then lowest index: the top live heap entry."""
        while True:
            _, _, group, stamp = self._groups[0]
            if stamp == self._stamp[group] and self._num_waiting[group] > 0:
                return int(group)
            heapq.heappop(self._groups)

    def _reprioritise(self, group: int) -> None:
        """Push the group's current priority; its older heap entries become stale."""
        self._stamp[group] += 1
        if self._num_waiting[group] > 0:
            entry = (
                -float(self._estimate[group]),
                float(self._executed[group]),
                int(group),
                int(self._stamp[group]),
            )
            heapq.heappush(self._groups, entry)

    def on_progress(self, request_id: int, num_tokens: int) -> None:
        group = self._group_of[request_id]
        self._executed[group] += num_tokens
        self._reprioritise(group)

    def on_finished(self, request_id: int, length: int) -> None:
        """UPDATEESTIMATE: the longest finished sibling so far (a conservative estimate)."""
        group = self._group_of[request_id]
        is_first = self._num_finished[group] == 0
        self._estimate[group] = length if is_first else max(self._estimate[group], length)
        self._num_finished[group] += 1
        self._reprioritise(group)

    def __len__(self) -> int:
        return self._size
