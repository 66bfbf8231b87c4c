"""Admission, KV-budget accounting and preemption. Imports no torch.

The KV budget counts cached positions over all running requests. Every iteration each running request
reserves room for its pending token plus the largest draft; when the reservations exceed the
budget, the most recently admitted request is preempted (its cache freed, its tokens kept) and
re-queued at the front, to be recomputed when room returns (recompute preemption, as in vLLM).

The scheduler is the one writer of where a request's cache stands (`slot`, `num_cached`). Its
contract with the engine: `num_cached` grows only when the engine confirms (`confirm`) that a
forward over the request completed, after it read the forward's results back. Nothing is assumed
to have run: a forward that raised, or whose results never came back (an asynchronous device step),
confirms nothing, so its tokens count as not cached and are fed again. A running request whose cache
was confirmed holds its whole context but the newest token, which the next forward feeds; one
admitted but never confirmed holds nothing and is prefilled again.
"""

from __future__ import annotations

import itertools

from collections import deque
from dataclasses import dataclass, field

from specroll.engine.admission import ADMIT_FRACTION, is_admission_due, num_to_admit
from specroll.engine.request import Request, Status
from specroll.engine_config import EngineConfig


@dataclass(frozen=True)
class SchedulerConfig:
    num_slots: int  # most requests running at once (the KV cache's rows)
    capacity: int  # positions per slot
    kv_budget_tokens: int  # cached positions allowed over all running requests
    max_prefill_tokens: int = 16384  # tokens recomputed by one prefill forward
    reserve_per_request: int = 1  # positions a running request may add in one forward (1 + max draft)
    admit_fraction: float = ADMIT_FRACTION  # admit once this share of slots is free (`is_admission_due`)

    def __post_init__(self) -> None:
        for name in "num_slots capacity kv_budget_tokens max_prefill_tokens reserve_per_request".split():
            if getattr(self, name) <= 0:
                raise ValueError(f"scheduler {name} must be positive, got {getattr(self, name)}")

    @classmethod
    def for_cache(cls, num_slots: int, capacity: int, engine: EngineConfig) -> SchedulerConfig:
        """An engine's scheduler: the cache's slots and positions, the engine's budgets (a verification
        forward adds at most max_draft + 1 positions to a request)."""
        return cls(
            num_slots=num_slots,
            capacity=capacity,
            kv_budget_tokens=engine.kv_budget_tokens or num_slots * capacity,
            max_prefill_tokens=engine.max_prefill_tokens,
            reserve_per_request=engine.max_draft + 1,
        )


@dataclass(frozen=True)
class SlotMove:
    """Move a running request's cache row, keeping running slots dense (0..B-1) so the model reads
    the cache as one view instead of gathering rows."""

    request_id: int
    source: int
    target: int
    length: int  # cached positions to copy


@dataclass
class ScheduleDecision:
    prefill: list[Request] = field(default_factory=list)  # (re)started: whole context pending
    decode: list[Request] = field(default_factory=list)  # running with one pending token, by slot
    preempted: list[Request] = field(default_factory=list)
    moves: list[SlotMove] = field(default_factory=list)  # apply before this iteration's forwards


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order
        self.free_slots = list(range(config.num_slots))

    @property
    def context_room(self) -> int:
        """The most positions (prompt plus max_tokens) one request may need: it must fit a slot and
        the KV budget alone, with room for one forward's draft."""
        return min(self.config.capacity, self.config.kv_budget_tokens) - self.config.reserve_per_request

    def add(self, request: Request) -> None:
        room = self.context_room
        if len(request.prompt_token_ids) + request.params.max_tokens > room:
            raise ValueError(
                f"request {request.request_id}: prompt ({len(request.prompt_token_ids)} tokens) plus "
                f"max_tokens ({request.params.max_tokens}) exceeds the context of {room} tokens"
            )
        self.waiting.append(request)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduleDecision:
        decision = ScheduleDecision()
        running = list(self.running)
        while self._usage(running) > self.config.kv_budget_tokens and running:
            victim = running.pop()
            self._preempt(victim)
            decision.preempted.append(victim)
        decision.moves = self._compact()
        unfilled = [r for r in running if r.num_cached == 0]  # admitted, but no prefill confirmed
        decision.decode = sorted((r for r in running if r.num_cached > 0), key=lambda r: r.slot)
        decision.prefill = unfilled + self._admit(self._usage(running))
        return decision

    def is_steady(self) -> bool:
        """Whether the next `schedule()` would run the same requests in the same slots, had every
        running request one token more: nothing to prefill, admit, preempt or move. An engine may then
        launch its next step before the current one's tokens are read back (`Engine.iterate`)."""
        if not self.running:
            return False
        grown = self._usage(self.running) + len(self.running)  # one token more each
        has_hole = bool(self.free_slots) and self.free_slots[0] < max(r.slot for r in self.running)
        return (
            grown <= self.config.kv_budget_tokens
            and all(r.num_cached > 0 for r in self.running)
            and not has_hole  # `_compact` would move a request down
            and not (self.waiting and self._admission_due())
        )

    def _admission_due(self) -> bool:
        return is_admission_due(
            len(self.running),
            len(self.free_slots),
            len(self.waiting),
            self.config.num_slots,
            self.config.admit_fraction,
        )

    def confirm(self, request: Request, num_written: int) -> None:
        """The engine read back a forward over running `request` that wrote `num_written` positions
        of its context to the cache, right after the `num_cached` there: its pending tokens and the
        drafts it kept. Call it after the request's emitted tokens are committed; the only place
        `num_cached` grows."""
        cached = request.num_cached + num_written
        if request.status is not Status.RUNNING or cached != request.num_tokens - 1:
            raise RuntimeError(
                f"request {request.request_id} ({request.status.value}): a forward wrote "
                f"{num_written} positions after {request.num_cached}, but its context of "
                f"{request.num_tokens} tokens needs all but the newest cached"
            )
        request.num_cached = cached

    def finish(self, request: Request) -> None:
        request.status = Status.FINISHED
        if request in self.running:
            self.running.remove(request)
        self._release(request)

    def abort(self, request: Request) -> None:
        """Drop a waiting or running request (it runs elsewhere now): its slot is freed."""
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self._release(request)

    def _usage(self, requests: list[Request]) -> int:
        return sum(r.num_tokens + self.config.reserve_per_request for r in requests)

    def _compact(self) -> list[SlotMove]:
        moves = []
        by_slot = sorted(self.running, key=lambda r: r.slot, reverse=True)
        for request in by_slot:
            if not self.free_slots or self.free_slots[0] > request.slot:
                break
            target = self.free_slots.pop(0)
            moves.append(SlotMove(request.request_id, request.slot, target, request.num_cached))
            self.free_slots.append(request.slot)
            self.free_slots.sort()
            request.slot = target
        return moves

    def _admit(self, usage: int) -> list[Request]:
        admitted: list[Request] = []
        if not self._admission_due():
            return admitted
        queued = [r.num_tokens for r in itertools.islice(self.waiting, len(self.free_slots))]
        for _ in range(num_to_admit(queued, len(self.free_slots), self.config.max_prefill_tokens)):
            request = self.waiting[0]
            need = request.num_tokens + self.config.reserve_per_request
            if usage + need > self.config.kv_budget_tokens:
                break
            self.waiting.popleft()
            request.status, request.slot, request.num_cached = Status.RUNNING, self.free_slots.pop(0), 0
            self.running.append(request)
            admitted.append(request)
            usage += need
        return admitted

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self._release(request)
        request.status = Status.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def _release(self, request: Request) -> None:
        if request.slot is not None:
            self.free_slots.append(request.slot)
            self.free_slots.sort()
        request.slot, request.num_cached = None, 0
