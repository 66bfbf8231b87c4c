"""Workers in the coordinator's own process, called one at a time: the multi-worker rollout's
decisions without Ray (debugging, and machines where a second process does not pay)."""

from __future__ import annotations

from collections import deque
from typing import Callable

from specroll.cluster.coordinator import WorkerLost
from specroll.cluster.engine_worker import EngineWorker
from specroll.cluster.work import WorkerReport, WorkerTelemetry, WorkItem


class InlinePool:
    def __init__(self, num_workers: int, make_worker: Callable[[int], EngineWorker]) -> None:
        self.num_workers = num_workers
        self._workers = [make_worker(i) for i in range(num_workers)]
        self._calls: deque[tuple[int, list[WorkItem], list[int]]] = deque()
        self._stopped: set[int] = set()

    def submit(self, worker: int, items: list[WorkItem], drop: list[int]) -> None:
        if self.in_flight(worker):
            raise RuntimeError(f"worker {worker} already has a call in flight")
        self._calls.append((worker, items, drop))

    def in_flight(self, worker: int) -> bool:
        return any(call[0] == worker for call in self._calls)

    def next_report(self) -> tuple[int, WorkerReport | WorkerLost]:
        """Run the oldest call to its report (a worker that raises is lost, with the error)."""
        worker, items, drop = self._calls.popleft()
        if worker in self._stopped:
            return worker, WorkerLost("the worker was stopped")
        try:
            return worker, self._workers[worker].advance(items, drop)
        except Exception as err:  # a failing engine must not take the coordinator down
            return worker, WorkerLost(f"{type(err).__name__}: {err}")

    def kill(self, worker: int) -> None:
        """Stop a worker: its call in flight, and any later one, reports it lost."""
        self._stopped.add(worker)

    def telemetry(self) -> list[WorkerTelemetry]:
        return [w.telemetry() for i, w in enumerate(self._workers) if i not in self._stopped]

    def close(self) -> None:
        self._workers.clear()
