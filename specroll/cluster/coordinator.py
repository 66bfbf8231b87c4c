"""The coordinator of a multi-worker rollout: owns every request's tokens, decides where each runs.

It reads like the loop of a real cluster: dispatch what fits, hand each idle worker its new work,
wait for the next report, apply it, re-dispatch. Where to run a request is the dispatcher's decision
(`specroll.scheduling.dispatch`, the same classes the simulator runs); the coordinator keeps the
bookkeeping: tokens, which worker runs which request, lost workers. Torch-free.

Chunks (divided dispatch) are decision points, not stops: a worker runs a request until it finishes
or is told to drop it. When a request passes its chunk's end, the dispatcher places its next chunk
(`DividedDispatch` with `resume_prefill`): on the same worker it just goes on there (its cache is
kept: no re-prefill); on another worker, that worker resumes it from the tokens held here and the
first drops it. Only the workers a request runs on report its tokens; what another
worker generated for it after it moved is dropped (in exact mode it is regenerated to the same tokens).

Fastest-of-N (SpecActor §4.2): once nothing waits for a worker, an idle worker takes copies of the
stragglers (`assign_fastest_of_n` over `COPY_LADDER`). Every copy resumes from the tokens held here
and, in exact mode, generates the same tokens; the coordinator takes whichever reports a token first,
and the request ends with its first copy to end, the others dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from specroll.cluster.work import Update, WorkerReport, WorkerTelemetry, WorkItem
from specroll.engine.request import Request, RequestOutput
from specroll.scheduling.dispatch import Dispatcher
from specroll.scheduling.fastest_of_n import COPY_LADDER, FonCandidate, assign_fastest_of_n

MAX_LOSSES = 3  # a request on this many lost workers is finished with an error, not re-dispatched


@dataclass(frozen=True)
class WorkerLost:
    """A worker died or failed: everything it held comes back to the coordinator."""

    reason: str


class WorkerPool(Protocol):
    num_workers: int

    def submit(self, worker: int, items: list[WorkItem], drop: list[int]) -> None: ...
    def in_flight(self, worker: int) -> bool: ...
    def next_report(self) -> tuple[int, WorkerReport | WorkerLost]: ...
    def kill(self, worker: int) -> None: ...
    def close(self) -> None: ...
    def telemetry(self) -> list[WorkerTelemetry]: ...


class ClusterError(RuntimeError):
    """The rollout cannot go on: every worker is lost, or no worker can take what is left."""


@dataclass
class RequestState:
    """The coordinator's record of one request: the truth about its tokens. The caller's `Request`
    is read once, into `item`, and never written: results leave as `output()`.

    | field                                          | writer                                           |
    |------------------------------------------------|--------------------------------------------------|
    | item                                           | the constructor (`WorkItem.first`)               |
    | token_ids, logprobs, num_drafted, num_accepted | `apply`, from a worker's `Update`                |
    | finish_reason, error, finish_seconds           | `finish`: the reason a worker reported, or the   |
    |                                                | coordinator's error for a request lost too often |
    | worker, copies, num_losses                     | the `Coordinator`: placement, copies, losses     |
    """

    item: WorkItem  # prompt and sampling parameters, nothing generated
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    finish_seconds: float | None = None
    worker: int | None = None  # where the dispatcher placed it (None: nowhere, or in its buffer)
    copies: set[int] = field(default_factory=set)  # other workers running it (Fastest-of-N)
    num_losses: int = 0
    num_drafted: int = 0  # on its current worker, as last reported
    num_accepted: int = 0

    @property
    def request_id(self) -> int:
        return self.item.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.item.prompt_token_ids) + len(self.token_ids)

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def hosts(self) -> set[int]:
        return self.copies | ({self.worker} if self.worker is not None else set())

    def apply(self, update: Update) -> bool:
        """Take the tokens past those held; False where the update disagrees with them (a copy that
        did not reproduce them, which exact mode rules out)."""
        held = len(self.token_ids)
        if update.start > held:
            raise ValueError(
                f"request {self.request_id}: an update from position {update.start} "
                f"skips tokens after the {held} held"
            )
        overlap = min(held - update.start, len(update.token_ids))
        if list(update.token_ids[:overlap]) != self.token_ids[update.start : update.start + overlap]:
            return False
        self.token_ids.extend(update.token_ids[overlap:])
        self.logprobs.extend(update.logprobs[overlap:])
        self.num_drafted, self.num_accepted = update.num_drafted, update.num_accepted
        return True

    def finish(self, reason: str, error: str | None, seconds: float) -> None:
        self.finish_reason, self.error, self.finish_seconds = reason, error, seconds

    def work_item(self) -> WorkItem:
        """The dispatch that resumes the request from the tokens held here."""
        return replace(
            self.item, output_token_ids=tuple(self.token_ids), output_logprobs=tuple(self.logprobs)
        )

    def output(self) -> RequestOutput:
        item = self.item
        return RequestOutput(
            item.request_id,
            item.group_id,
            item.sample_index,
            list(self.token_ids),
            list(self.logprobs),
            self.finish_reason,
            self.error,
        )


class WorkerSlots:
    """The coordinator's view of one worker, in the shape the dispatchers read (`WorkerSlots`)."""

    def __init__(self, index: int, kv_capacity: float, max_num_seqs: int, coordinator: "Coordinator"):
        self.index, self.kv_capacity, self.max_num_seqs = index, kv_capacity, max_num_seqs
        self.alive = True
        self.running: dict[int, int] = {}  # request -> the end of its chunk, for those dispatched here
        self.hosted: set[int] = set()  # requests running here: `running`, and any back in the buffer
        self.outbox: list[WorkItem] = []
        self.drop: list[int] = []  # request ids the worker is to stop running (they moved)
        self._coordinator = coordinator

    @property
    def num_running(self) -> int:
        return len(self.running)

    def context_tokens(self) -> float:
        states = self._coordinator.states
        return float(sum(states[i].num_tokens for i in self.running))

    def reserved_tokens(self) -> float:
        states = self._coordinator.states
        return float(sum(len(states[i].item.prompt_token_ids) + stop for i, stop in self.running.items()))

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_tokens: float) -> None:
        self._coordinator.place(self, request_id, int(stop))


@dataclass
class ClusterOutcome:
    states: list[RequestState]  # the coordinator's records, in the order of the requests given
    makespan_seconds: float
    worker_busy_seconds: list[float]
    telemetry: list[WorkerTelemetry]
    num_reports: int
    num_lost_workers: int
    num_reprefills: int  # dispatches that resumed generated tokens on a worker without their cache
    reprefill_tokens: float
    dropped_tokens: int  # generated on a worker after its request had moved away
    num_copies: int  # Fastest-of-N copies started

    @property
    def outputs(self) -> list[RequestOutput]:
        """Every request's result, in the order given (the caller's requests are left as they were)."""
        return [state.output() for state in self.states]


ReportHook = Callable[["Coordinator", int], None]  # coordinator, worker whose report was just applied


class Coordinator:
    def __init__(
        self,
        requests: Sequence[Request],
        dispatcher: Dispatcher,
        pool: WorkerPool,
        kv_capacity: float,
        max_num_seqs: int,
        on_report: ReportHook | None = None,
        fastest_of_n: bool = False,
    ):
        self.states = [RequestState(WorkItem.first(r)) for r in requests]  # the dispatcher's i is states[i]
        self._index = {r.request_id: i for i, r in enumerate(requests)}
        if len(self._index) != len(requests):
            raise ValueError("request ids must be unique")
        self.dispatcher, self.pool, self.on_report = dispatcher, pool, on_report
        self.slots = [WorkerSlots(i, kv_capacity, max_num_seqs, self) for i in range(pool.num_workers)]
        self.busy_seconds = [0.0] * pool.num_workers
        self.fastest_of_n = fastest_of_n
        self.max_num_seqs = max_num_seqs
        self.num_reports = 0
        self.dropped_tokens = 0
        self.num_copies = 0
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
            changed = (
                self._lose(worker, outcome.reason)
                if isinstance(outcome, WorkerLost)
                else self._apply(outcome)
            )
            self.dispatcher.fill(self.slots, self._touch, changed)
            self._copy_stragglers()
            self._hand_out()
            if self.on_report is not None:
                self.on_report(self, worker)
        return self._outcome(time.perf_counter() - self._start)

    def _touch(self, index: int) -> WorkerSlots:
        return self.slots[index]

    def place(self, slot: WorkerSlots, index: int, stop: int) -> None:
        """The dispatcher put request `index`'s next chunk on `slot`: go on in place, or move it."""
        state = self.states[index]
        if state.is_finished:
            return  # it finished while its next chunk waited in the buffer
        slot.running[index] = stop
        if state.worker == slot.index:
            return  # it never stopped running there
        for worker in state.hosts() - {slot.index}:
            self._unhost(index, worker, drop=True)
        if index not in slot.hosted:  # else a copy of it runs there already, and goes on
            slot.outbox.append(state.work_item())
            slot.hosted.add(index)
        state.worker = slot.index
        state.copies.clear()

    def _copy_stragglers(self) -> None:
        """Fastest-of-N: when nothing waits for a worker, idle workers take copies of stragglers."""
        if not self.fastest_of_n or self.dispatcher.has_pending():
            return
        idle = [s.index for s in self.slots if s.alive and not s.hosted and not self.pool.in_flight(s.index)]
        if not idle:
            return
        stragglers = [
            FonCandidate(i, s.num_accepted / max(s.num_drafted, 1), len(s.token_ids))
            for i, s in enumerate(self.states)
            if not s.is_finished and s.worker is not None and not s.copies
        ]
        for copy in assign_fastest_of_n(stragglers, COPY_LADDER, idle, {}, self.max_num_seqs):
            state, slot = self.states[copy.request_id], self.slots[copy.worker]
            slot.outbox.append(state.work_item())
            slot.hosted.add(copy.request_id)
            state.copies.add(copy.worker)
            self.num_copies += 1

    def _unhost(self, index: int, worker: int, drop: bool) -> None:
        slot = self.slots[worker]
        slot.hosted.discard(index)
        slot.running.pop(index, None)
        if drop:
            slot.drop.append(self.states[index].request_id)

    def _hand_out(self) -> None:
        """Every live worker that is idle and has work (or requests to drop) gets a call."""
        for slot in self.slots:
            if slot.alive and (slot.hosted or slot.drop) and not self.pool.in_flight(slot.index):
                items, drop = slot.outbox, slot.drop
                slot.outbox, slot.drop = [], []
                self.pool.submit(slot.index, items, drop)

    def _apply(self, report: WorkerReport) -> list[int]:
        self.num_reports += 1
        self.busy_seconds[report.worker] += report.busy_seconds
        changed = {report.worker}
        for update in report.updates:
            index = self._index[update.request_id]
            state = self.states[index]
            if state.is_finished or report.worker not in state.hosts():
                self.dropped_tokens += len(update.token_ids)  # it moved away from this worker
                continue
            if not state.apply(update):
                if report.worker == state.worker:
                    raise ValueError(
                        f"request {update.request_id}: worker {report.worker} generated other "
                        f"tokens than a copy of it did (copies need exact, batch-invariant decoding)"
                    )
                state.copies.discard(report.worker)
                self._unhost(index, report.worker, drop=True)
                continue
            changed |= self._after_update(index, report.worker, update)
        return sorted(changed)

    def _after_update(self, index: int, worker: int, update: Update) -> set[int]:
        """Finish the request, or return it to the dispatcher at its chunk's end; the workers changed."""
        state = self.states[index]
        if update.ended:  # finished (a worker runs a request to its end unless told to drop it)
            hosts = state.hosts()
            for host in hosts:
                self._unhost(index, host, drop=host != worker)
            state.worker = None
            state.copies.clear()
            self._finish(index, update.finish_reason, update.error)  # as the worker's request decided
            return hosts
        primary = self.slots[state.worker] if state.worker is not None else None
        if (
            primary is not None
            and index in primary.running
            and len(state.token_ids) >= primary.running[index]
        ):
            del primary.running[index]  # its chunk is over: the dispatcher places the next one
            self.dispatcher.on_stop(primary, index, float(len(state.token_ids)))
            return {primary.index}
        return set()

    def _finish(self, index: int, reason: str, error: str | None = None) -> None:
        state = self.states[index]
        state.finish(reason, error, time.perf_counter() - self._start)
        self._unfinished -= 1
        self.dispatcher.on_finished(index, len(state.token_ids))

    def _lose(self, worker: int, reason: str) -> list[int]:
        """The worker is gone: its requests go back to the dispatcher from the tokens last reported
        (a request lost on MAX_LOSSES workers is finished with the error instead)."""
        slot = self.slots[worker]
        slot.alive = False
        for index in [i for i in slot.hosted if worker in self.states[i].copies]:
            self.states[index].copies.discard(worker)  # a copy: the request runs on elsewhere
            self._unhost(index, worker, drop=False)
        running, waiting = list(slot.running), [i for i in slot.hosted if i not in slot.running]
        for index in running + waiting:
            self.states[index].worker = None
            self._unhost(index, worker, drop=False)
            self.states[index].num_losses += 1
        slot.outbox.clear()
        slot.drop.clear()
        given_up = [i for i in running if self.states[i].num_losses >= MAX_LOSSES]
        back = [(i, float(len(self.states[i].token_ids))) for i in running if i not in given_up]
        try:
            self.dispatcher.on_lost(worker, back)  # the waiting ones are in the dispatcher's buffer already
        except RuntimeError as err:
            raise ClusterError(f"{err}; worker {worker} was lost: {reason}") from None
        for index in given_up:
            self._finish(index, "error", f"lost with {MAX_LOSSES} workers; the last: {reason}")
        return [s.index for s in self.slots if s.alive]

    def _outcome(self, makespan: float) -> ClusterOutcome:
        return ClusterOutcome(
            self.states,
            makespan,
            self.busy_seconds,
            self.pool.telemetry(),
            self.num_reports,
            sum(not s.alive for s in self.slots),
            self.dispatcher.num_reprefills,
            self.dispatcher.reprefill_tokens,
            self.dropped_tokens,
            self.num_copies,
        )
