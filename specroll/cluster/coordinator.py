"""The coordinator of a multi-worker rollout: owns every request's tokens, decides where each runs.

It reads like the loop of a real cluster: dispatch what fits, hand each idle worker its new work,
wait for the next report, apply it, re-dispatch. Where to run a request is the dispatcher's decision
(`specroll.scheduling.dispatch`, the same classes the simulator runs); the coordinator keeps the
bookkeeping: tokens, which worker holds which request, lost workers. Torch-free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from specroll.cluster.work import Update, WorkerReport, WorkerTelemetry, WorkItem
from specroll.engine.request import Request
from specroll.scheduling.dispatch import Dispatcher

MAX_LOSSES = 3  # a request on this many lost workers is finished with an error, not re-dispatched


@dataclass(frozen=True)
class WorkerLost:
    """A worker died or failed: everything it held comes back to the coordinator."""

    reason: str


class WorkerPool(Protocol):
    num_workers: int

    def submit(self, worker: int, items: list[WorkItem]) -> None: ...
    def in_flight(self, worker: int) -> bool: ...
    def next_report(self) -> tuple[int, WorkerReport | WorkerLost]: ...
    def kill(self, worker: int) -> None: ...
    def close(self) -> None: ...
    def telemetry(self) -> list[WorkerTelemetry]: ...


class ClusterError(RuntimeError):
    """The rollout cannot go on: every worker is lost, or no worker can take what is left."""


@dataclass
class RequestState:
    """The coordinator's copy of one request: the truth about its tokens."""

    request: Request  # prompt and sampling parameters; its outputs are filled in at the end
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    finish_seconds: float | None = None
    worker: int | None = None
    num_dispatches: int = 0
    num_losses: int = 0

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def apply(self, update: Update) -> None:
        if update.start != len(self.token_ids):
            raise ValueError(f"request {self.request.request_id}: an update from position {update.start} "
                             f"does not follow the {len(self.token_ids)} tokens held")
        self.token_ids.extend(update.token_ids)
        self.logprobs.extend(update.logprobs)

    def is_done_after(self, update: Update) -> bool:
        """The dispatch ended because the request did (not at a chunk's end)."""
        return (update.error is not None or update.finish_reason == "stop"
                or len(self.token_ids) >= self.request.params.max_tokens)


class WorkerSlots:
    """The coordinator's view of one worker, in the shape the dispatchers read (`WorkerSlots`)."""

    def __init__(self, index: int, kv_capacity: float, max_num_seqs: int, states: Sequence[RequestState]):
        self.index, self.kv_capacity, self.max_num_seqs = index, kv_capacity, max_num_seqs
        self.alive = True
        self.running: dict[int, int] = {}  # request id -> the stop of its dispatch
        self.outbox: list[WorkItem] = []
        self._states = states

    @property
    def num_running(self) -> int:
        return len(self.running)

    def context_tokens(self) -> float:
        return float(sum(self._tokens(r) + len(self._states[r].token_ids) for r in self.running))

    def reserved_tokens(self) -> float:
        return float(sum(self._tokens(r) + stop for r, stop in self.running.items()))

    def _tokens(self, request_id: int) -> int:
        return len(self._states[request_id].request.prompt_token_ids)

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_seconds: float) -> None:
        state = self._states[request_id]
        if int(position) != len(state.token_ids):
            raise ValueError(f"request {request_id} dispatched at {position}, holds {len(state.token_ids)} tokens")
        r = state.request
        self.outbox.append(WorkItem(r.request_id, r.group_id, r.sample_index, r.prompt_token_ids, r.params,
                                    tuple(state.token_ids), tuple(state.logprobs), int(stop)))
        self.running[request_id] = int(stop)
        state.worker = self.index
        state.num_dispatches += 1


@dataclass
class ClusterOutcome:
    states: list[RequestState]
    makespan_seconds: float
    worker_busy_seconds: list[float]
    telemetry: list[WorkerTelemetry]
    num_reports: int
    num_lost_workers: int
    num_reprefills: int
    reprefill_tokens: float


ReportHook = Callable[["Coordinator", int], None]  # coordinator, worker whose report was just applied


class Coordinator:
    def __init__(self, requests: Sequence[Request], dispatcher: Dispatcher, pool: WorkerPool,
                 kv_capacity: float, max_num_seqs: int, on_report: ReportHook | None = None):
        self.states = [RequestState(r) for r in requests]  # the dispatcher's request i is states[i]
        self._index = {r.request_id: i for i, r in enumerate(requests)}
        if len(self._index) != len(requests):
            raise ValueError("request ids must be unique")
        self.dispatcher, self.pool, self.on_report = dispatcher, pool, on_report
        self.slots = [WorkerSlots(i, kv_capacity, max_num_seqs, self.states) for i in range(pool.num_workers)]
        self.busy_seconds = [0.0] * pool.num_workers
        self.num_reports = 0
        self._unfinished = len(self.states)
        self._start = 0.0

    def run(self) -> ClusterOutcome:
        self._start = time.perf_counter()
        self.dispatcher.fill(self.slots, self._touch, range(len(self.slots)))
        self._hand_out()
        while self._unfinished:
            if not any(self.pool.in_flight(s.index) for s in self.slots if s.alive):
                raise ClusterError(f"{self._unfinished} requests are left and no live worker can take them")
            worker, outcome = self.pool.next_report()
            changed = self._lose(worker, outcome.reason) if isinstance(outcome, WorkerLost) else self._apply(outcome)
            self.dispatcher.fill(self.slots, self._touch, changed)
            self._hand_out()
            if self.on_report is not None:
                self.on_report(self, worker)
        return self._outcome(time.perf_counter() - self._start)

    def _touch(self, index: int) -> WorkerSlots:
        return self.slots[index]

    def _hand_out(self) -> None:
        """Every live worker that is idle and holds work gets a call with its new dispatches."""
        for slot in self.slots:
            if slot.alive and slot.running and not self.pool.in_flight(slot.index):
                items, slot.outbox = slot.outbox, []
                self.pool.submit(slot.index, items)

    def _apply(self, report: WorkerReport) -> list[int]:
        self.num_reports += 1
        self.busy_seconds[report.worker] += report.busy_seconds
        slot = self.slots[report.worker]
        for update in report.updates:
            index = self._index[update.request_id]
            state = self.states[index]
            state.apply(update)
            if update.ended:
                slot.running.pop(index)
                self._end_dispatch(slot, index, update)
        return [report.worker]

    def _end_dispatch(self, slot: WorkerSlots, index: int, update: Update) -> None:
        state = self.states[index]
        if state.is_done_after(update):
            reason = "error" if update.error else update.finish_reason or "length"
            self._finish(index, reason, update.error)
        else:
            self.dispatcher.on_stop(slot, index, float(len(state.token_ids)))

    def _finish(self, index: int, reason: str, error: str | None = None) -> None:
        state = self.states[index]
        state.finish_reason, state.error = reason, error
        state.finish_seconds = time.perf_counter() - self._start
        self._unfinished -= 1
        self.dispatcher.on_finished(index, len(state.token_ids))

    def _lose(self, worker: int, reason: str) -> list[int]:
        """The worker is gone: its requests go back to the dispatcher from the tokens last reported
        (a request lost on MAX_LOSSES workers is finished with the error instead)."""
        slot = self.slots[worker]
        slot.alive = False
        orphans = list(slot.running)
        slot.running.clear()
        slot.outbox.clear()
        for index in orphans:
            self.states[index].num_losses += 1
        given_up = [i for i in orphans if self.states[i].num_losses >= MAX_LOSSES]
        back = [(i, float(len(self.states[i].token_ids))) for i in orphans if i not in given_up]
        try:
            self.dispatcher.on_lost(worker, back)
        except RuntimeError as err:
            raise ClusterError(f"{err}; worker {worker} was lost: {reason}") from None
        for index in given_up:
            self._finish(index, "error", f"lost with {MAX_LOSSES} workers; the last: {reason}")
        return [s.index for s in self.slots if s.alive]

    def _outcome(self, makespan: float) -> ClusterOutcome:
        for state in self.states:
            state.request.output_token_ids = list(state.token_ids)
            state.request.output_logprobs = list(state.logprobs)
            state.request.finish_reason = state.finish_reason
        return ClusterOutcome(self.states, makespan, self.busy_seconds, self.pool.telemetry(), self.num_reports,
                              sum(not s.alive for s in self.slots), self.dispatcher.num_reprefills,
                              self.dispatcher.reprefill_tokens)
