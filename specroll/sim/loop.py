"""The heap-based event loop of one synchronous rollout step.

Events are worker segment ends: a copy finishes its request, a chunk ends, the KV cache overflows, or
the segment hits the re-planning cadence. Handling one event: bring the worker to now, retire what
stopped, preempt if the KV cache overflowed, let the dispatcher fill workers, give freed workers
Fastest-of-N copies, and re-plan every worker that changed. Stale heap entries are skipped by version.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from specroll.scheduling.fastest_of_n import FonCandidate, assign_fastest_of_n, straggler_order
from specroll.sim.acceptance_rates import AcceptanceModel
from specroll.sim.roofline import ForwardCost
from specroll.scheduling.dispatch import PREEMPT_TO_FRACTION, Dispatcher
from specroll.sim.speculation import RunningBatch, SpeculationStrategy
from specroll.sim.worker import Worker
from specroll.sim.workload import Workload


@dataclass
class LoopConfig:
    max_iters_per_segment: int = 1000  # re-plan cadence (SpecActor §4.1 reconfigures every 1000)
    is_fastest_of_n: bool = False
    record_segments: bool = False
    contention: float = 0.0  # a forward takes 1 + contention x (other busy workers) times as long:
    # workers that share one machine's cores, memory and caches (specroll's engines on one CPU)


@dataclass
class SimTrace:
    finish_seconds: np.ndarray  # (num_requests,) completion time of each request
    generated: np.ndarray  # (num_requests,) output tokens credited at completion
    busy_gpu_seconds: float
    total_gpus: int
    num_events: int
    num_preemptions: int
    num_fon_copies: int
    segments: list[tuple[int, float, float, int]] = field(default_factory=list)  # worker, start, end, running


class RolloutLoop:
    def __init__(
        self,
        workload: Workload,
        acceptance: AcceptanceModel,
        base_acceptance: np.ndarray,
        workers: list[Worker],
        dispatcher: Dispatcher,
        strategy: SpeculationStrategy,
        prefill_cost: ForwardCost,
        total_gpus: int,
        config: LoopConfig,
    ):
        self.workload, self.acceptance, self.base = workload, acceptance, base_acceptance
        self.workers, self.dispatcher, self.strategy = workers, dispatcher, strategy
        self.prefill_cost, self.total_gpus, self.config = prefill_cost, total_gpus, config
        n = workload.num_requests
        self.finish_seconds = np.full(n, np.nan)
        self.generated = np.zeros(n)
        self.finished_in_group = np.zeros(workload.num_groups, dtype=np.int64)
        self.copies_on: list[set[int]] = [set() for _ in range(n)]
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._now = 0.0
        self._touched: set[int] = set()
        self.num_events = 0
        self.num_fon_copies = 0
        self.segments: list[tuple[int, float, float, int]] = []
        self._open: dict[int, tuple[float, float, int]] = {}  # worker -> planned (start, end, running)
        self._num_busy = 0  # workers with requests, as last planned

    def run(self) -> SimTrace:
        self.dispatcher.fill(self.workers, self._touch, range(len(self.workers)))
        self._replan_touched()
        while self._heap:
            time_seconds, _, index, version = heapq.heappop(self._heap)
            if version == self.workers[index].version:
                self._now = time_seconds
                self._handle(self.workers[index])
                self.num_events += 1
        if np.isnan(self.finish_seconds).any():
            raise RuntimeError(
                f"{int(np.isnan(self.finish_seconds).sum())} requests never ran: KV budget too small?"
            )
        return self._trace()

    def _handle(self, worker: Worker) -> None:
        self._touch(worker.index)
        self._retire_stopped(worker)
        if self.dispatcher.is_growing_kv and worker.context_tokens() >= worker.kv_capacity - 1e-6:
            self._preempt_overflow(worker)
        self.dispatcher.fill(self.workers, self._touch, sorted(self._touched))  # finishes touch other copies
        if self.config.is_fastest_of_n and worker.num_running == 0 and not self.dispatcher.has_pending():
            self._fastest_of_n()
        self._replan_touched()

    def _touch(self, index: int) -> Worker:
        worker = self.workers[index]
        if index not in self._touched:
            worker.sync(self._now)
            self._touched.add(index)
        return worker

    def _retire_stopped(self, worker: Worker) -> None:
        stopped = worker.reached_stop()
        ids, positions = worker.request_ids[stopped], worker.positions[stopped]
        finished = positions >= self.workload.output_lengths[ids] - 1e-6
        for request_id, position, is_finished in zip(ids, positions, finished):
            if is_finished:
                self._finish(int(request_id), worker.index)
            else:
                self.dispatcher.on_stop(worker, int(request_id), float(position))
                self.copies_on[request_id].discard(worker.index)
        worker.remove(stopped)
        if finished.any():
            worker.report()

    def _finish(self, request_id: int, at_worker: int) -> None:
        if not np.isnan(self.finish_seconds[request_id]):
            return  # another copy finished at the same instant
        length = int(self.workload.output_lengths[request_id])
        self.finish_seconds[request_id] = self._now
        self.generated[request_id] = length
        self.finished_in_group[self.workload.group_ids[request_id]] += 1
        self.workers[at_worker].record_finished(int(self.workload.group_ids[request_id]), length)
        self.dispatcher.on_finished(request_id, length)
        for index in self.copies_on[request_id] - {at_worker}:
            other = self._touch(index)
            other.remove(other.request_ids == request_id)
        self.copies_on[request_id].clear()

    def _preempt_overflow(self, worker: Worker) -> None:
        """vLLM recompute preemption: drop the newest requests until the cache fits again. A
        Fastest-of-N copy whose request runs elsewhere is dropped, not queued: queued, it would run
        again after its request had finished."""
        while worker.num_in_batch > 1 and worker.context_tokens() > PREEMPT_TO_FRACTION * worker.kv_capacity:
            last = np.zeros(worker.num_in_batch, dtype=bool)
            last[-1] = True
            request_id = int(worker.request_ids[-1])
            self.copies_on[request_id].discard(worker.index)
            if not self._holders(request_id):
                self.dispatcher.on_preempted(worker, request_id, float(worker.positions[-1]))
            worker.remove(last)

    def _holders(self, request_id: int) -> list[int]:
        """Workers whose batch runs a copy of the request."""
        return [i for i in self.copies_on[request_id] if (self.workers[i].request_ids == request_id).any()]

    def _is_finished(self, request_id: int) -> bool:
        return not np.isnan(self.finish_seconds[request_id])

    def _drop_finished(self, worker: Worker) -> None:
        """A request a dispatcher queued before a copy of it finished is not run again."""
        worker.waiting = [p for p in worker.waiting if not self._is_finished(p.request_id)]
        finished = ~np.isnan(self.finish_seconds[worker.request_ids])
        if finished.any():
            worker.remove(finished)

    def _fastest_of_n(self) -> None:
        free = [w.index for w in self.workers if w.num_running == 0]
        candidates = self._fon_candidates(len(free) * self.workers[0].max_num_seqs)
        ladder = list(range(len(self.acceptance.drafters)))
        chosen = assign_fastest_of_n(candidates, ladder, free, {}, self.workers[0].max_num_seqs)
        for assignment in chosen:
            self._add_copy(assignment.request_id, assignment.drafter, assignment.worker)

    def _fon_candidates(self, limit: int) -> list[FonCandidate]:
        """Every running request (its lowest acceptance and furthest position over its copies), the
        `limit` first in the order Fastest-of-N serves them."""
        drafters: dict[int, set[int]] = {}
        rates: dict[int, float] = {}
        positions: dict[int, float] = {}
        for worker in self.workers:
            if worker.num_running == 0:
                continue
            rate = self._acceptance(worker)
            columns = (worker.request_ids.tolist(), worker.drafters.tolist(), rate, worker.positions.tolist())
            for request_id, drafter, p, position in zip(*columns):
                drafters.setdefault(request_id, set()).add(drafter)
                rates[request_id] = min(rates.get(request_id, 1.0), float(p))
                positions[request_id] = max(positions.get(request_id, 0.0), position)
        candidates = [
            FonCandidate(r, rates[r], int(positions[r]), frozenset(drafters[r]))
            for r in rates
            if not self._is_finished(r)
        ]
        return straggler_order(candidates)[:limit]

    def _add_copy(self, request_id: int, drafter: int, index: int) -> None:
        holders = self._holders(request_id)
        if not holders or self._is_finished(request_id):
            return  # its chunk ended during this event: the request is back in the dispatcher's buffer
        source = self._touch(holders[0])
        position = float(source.positions[source.request_ids == request_id][0])
        length = float(self.workload.output_lengths[request_id])
        recovery = self.workload.prompt_tokens + position  # the copy recomputes the context it resumes from
        self._touch(index).add(request_id, drafter, position, length, recovery)
        self.copies_on[request_id].add(index)
        self.num_fon_copies += 1

    def _acceptance(self, worker: Worker) -> np.ndarray:
        base = self.base[worker.drafters, worker.request_ids]
        drift = np.array([d.drift for d in self.acceptance.drafters])[worker.drafters]
        return np.clip(base + drift * worker.positions / self.workload.max_tokens, 0.0, 0.99)

    def _view(self, worker: Worker) -> RunningBatch:
        ids = worker.request_ids
        groups = self.workload.group_ids[ids]
        return RunningBatch(
            worker=worker.index,
            request_ids=ids,
            group_ids=groups,
            drafters=worker.drafters,
            acceptance=self._acceptance(worker),
            positions=worker.positions,
            finished_siblings=self.finished_in_group[groups],
            max_tokens=self.workload.max_tokens,
            prompt_tokens=self.workload.prompt_tokens,
            num_waiting=len(worker.waiting),
            finished_lengths=worker.finished_lengths.sorted(),
            prompt_lengths=worker.prompt_lengths,
        )

    def _slowdown(self) -> float:
        """Every busy worker's forwards slow down with the others busy beside it; when their number
        changes, every busy worker re-plans at the new pace."""
        busy = sum(w.num_running > 0 for w in self.workers)
        if busy != self._num_busy and self.config.contention:
            for worker in self.workers:
                if worker.num_in_batch:
                    self._touch(worker.index)
        self._num_busy = busy
        return 1.0 + self.config.contention * max(busy - 1, 0)

    def _replan_touched(self) -> None:
        slowdown = self._slowdown()
        for index in sorted(self._touched):
            worker = self.workers[index]
            self._drop_finished(worker)
            worker.admit(self.prefill_cost, slowdown)
            for request_id in worker.request_ids.tolist():
                self.copies_on[request_id].add(index)
            end = worker.plan(
                self._view(worker),
                self.strategy,
                self.config.max_iters_per_segment,
                self.dispatcher.is_growing_kv,
                slowdown,
            )
            worker.version += 1
            if self.config.record_segments:
                self._record(index, end, worker.num_in_batch)
            if end < math.inf:
                self._seq += 1
                heapq.heappush(self._heap, (end, self._seq, index, worker.version))
        self._touched.clear()

    def _record(self, index: int, end: float, num_running: int) -> None:
        """Close the worker's previous segment at now (it may have been cut short), open the new one."""
        if index in self._open:
            start, planned_end, running = self._open.pop(index)
            if min(planned_end, self._now) > start:
                self.segments.append((index, start, min(planned_end, self._now), running))
        if end < math.inf:
            self._open[index] = (self._now, end, num_running)

    def _trace(self) -> SimTrace:
        busy = sum(w.busy_seconds * w.num_gpus for w in self.workers)
        return SimTrace(
            self.finish_seconds,
            self.generated,
            busy,
            self.total_gpus,
            self.num_events,
            self.dispatcher.num_preemptions,
            self.num_fon_copies,
            self.segments,
        )
