"""One worker's running batch, advanced in closed form between events.

Between two events a worker's batch is fixed, so every iteration yields the same expected tokens per
copy; the number of iterations to the next finish (or chunk end, or KV overflow) is a minimum over
copies, and the segment's latency is iterations x the iteration latency at the segment's mid-point
context. `sync` advances the state to any time inside a segment (fluid approximation).

A dispatcher places requests on the worker (`add`); they wait there until the worker takes them into
its batch (`admit`, at the next plan): at once, or under specroll's engine rules (`EngineRules`),
and the requests taken together share prefill forwards, each one priced by `cost_model.prefill_seconds`
(a prefill emits its request's first token, as an engine's does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specroll.engine.admission import ADMIT_FRACTION, is_admission_due, num_to_admit, plan_prefill_forwards
from specroll.engine_config import EngineConfig
from specroll.model.attention_chunks import plan_chunks
from specroll.policies.prompt_lengths import PromptLengths
from specroll.policies.remaining_lengths import FinishedLengths
from specroll.sim.roofline import ForwardCost, prefill_seconds
from specroll.sim.speculation import RunningBatch, SpeculationStrategy, IterationPlan

_EPS = 1e-6
_ENGINE = EngineConfig()


@dataclass(frozen=True)
class EngineRules:
    """A worker that stands for one of specroll's engines: it admits its queued requests into
    `num_slots` by `is_admission_due` and `max_prefill_tokens`, cuts their prefills into forwards by
    `plan_prefill_forwards`, and its forwards read every row's cache up to the longest row of its
    attention chunk (`plan_chunks` at the runner's defaults; rows in admission order, as the engine's
    slots roughly are). Without them a worker takes every placed request at once and reads each row's
    own context (vLLM-style paged attention)."""

    num_slots: int
    admit_fraction: float = ADMIT_FRACTION
    max_prefill_tokens: int = _ENGINE.max_prefill_tokens
    min_prefill_split: int = _ENGINE.min_prefill_split


@dataclass
class Segment:
    start_seconds: float  # decoding starts here (after any prefill)
    end_seconds: float
    iteration_seconds: float
    tokens_per_iter: np.ndarray  # (b,)


@dataclass(frozen=True)
class Placed:
    """A request on the worker, not yet in its batch."""

    request_id: int
    drafter: int
    position: float
    stop: float  # where the dispatcher's residency ends (what the worker reserves KV for)
    prefill_tokens: float  # context to compute before it decodes (0: its cache is here)


class Worker:
    def __init__(
        self,
        index: int,
        num_gpus: int,
        kv_capacity: float,
        max_num_seqs: int,
        prompt_tokens: float | np.ndarray,
        output_lengths: np.ndarray | None = None,
        rules: EngineRules | None = None,
        report_seconds: float = 0.0,
    ):
        """`prompt_tokens`: one figure for every request, or each request's (indexed by request id).
        `output_lengths`: where each request ends, for a worker that knows it when its dispatcher
        does not (a replay of measured requests). `report_seconds`: time the worker idles after an
        iteration in which a request finished (an engine on Ray reporting to its coordinator)."""
        self.index = index
        self.num_gpus = num_gpus
        self.kv_capacity = kv_capacity
        self.max_num_seqs = max_num_seqs
        self.prompt_tokens = prompt_tokens
        self.output_lengths = output_lengths
        self.rules = rules
        self.report_seconds = report_seconds
        self.time_seconds = 0.0
        self.busy_seconds = 0.0
        self.pending_seconds = 0.0  # before the batch decodes again: prefills, reports
        self.waiting: list[Placed] = []
        self.request_ids = np.zeros(0, dtype=np.int64)
        self.drafters = np.zeros(0, dtype=np.int64)
        self.positions = np.zeros(0)
        self.stops = np.zeros(0)  # position at which this residency ends
        self.reserved_stops = np.zeros(0)  # the dispatcher's stop, which may lie past the end
        self.segment: Segment | None = None
        self.version = 0
        # what its engine's policy is shown of the requests it finished (`BatchView.finished_lengths`,
        # `RequestView.prompt_lengths`): its own, as each engine keeps its own; a prompt is a group
        self.finished_lengths = FinishedLengths()
        self.prompt_lengths = PromptLengths()

    @property
    def num_running(self) -> int:
        """Requests placed here, in the batch or waiting for it (what a dispatcher counts)."""
        return len(self.request_ids) + len(self.waiting)

    @property
    def num_in_batch(self) -> int:
        return int(self.request_ids.size)

    def _prompts(self, request_ids: np.ndarray) -> np.ndarray:
        """(len(request_ids),) each request's prompt tokens."""
        prompts = np.asarray(self.prompt_tokens, dtype=np.float64)
        return np.full(len(request_ids), float(prompts)) if prompts.ndim == 0 else prompts[request_ids]

    def _waiting(self, field: str) -> np.ndarray:
        return np.array([getattr(p, field) for p in self.waiting], dtype=np.float64)

    def context_tokens(self) -> float:
        waiting_ids = self._waiting("request_id").astype(np.int64)
        return self._batch_context() + float(np.sum(self._waiting("position") + self._prompts(waiting_ids)))

    def reserved_tokens(self) -> float:
        waiting_ids = self._waiting("request_id").astype(np.int64)
        return float(np.sum(self.reserved_stops + self._prompts(self.request_ids))) + float(
            np.sum(self._waiting("stop") + self._prompts(waiting_ids))
        )

    def sync(self, now_seconds: float) -> None:
        """Advance positions and busy time to now_seconds, inside the current segment."""
        if self.segment is not None and now_seconds > self.segment.start_seconds:
            done = min(now_seconds, self.segment.end_seconds) - max(
                self.time_seconds, self.segment.start_seconds
            )
            if done > 0:
                gained = self.segment.tokens_per_iter * (done / self.segment.iteration_seconds)
                self.positions = np.minimum(self.positions + gained, self.stops)
        if self.num_in_batch:
            self.busy_seconds += max(now_seconds - self.time_seconds, 0.0)
        if self.segment is not None:
            self.pending_seconds = max(self.segment.start_seconds - now_seconds, 0.0)
        self.time_seconds = max(self.time_seconds, now_seconds)

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_tokens: float) -> None:
        self.waiting.append(Placed(request_id, drafter, position, stop, prefill_tokens))

    def record_finished(self, group_id: int, length: int) -> None:
        """A request of group `group_id` finished here, `length` tokens long (`Engine._append`)."""
        self.finished_lengths.add(length)
        self.prompt_lengths.add(group_id, length)

    def report(self) -> None:
        """A request finished in this iteration: the worker idles for its report's round trip."""
        self.pending_seconds += self.report_seconds

    def admit(self, cost: ForwardCost, slowdown: float = 1.0) -> None:
        """Take waiting requests into the batch, paying their prefills in shared forwards (each
        `slowdown` times as long as `cost` says)."""
        taken = self._to_admit()
        self.waiting = self.waiting[len(taken) :]
        for placed in taken:
            self._start(placed)
        tokens = [p.prefill_tokens for p in taken if p.prefill_tokens > 0]
        split = self.rules.min_prefill_split if self.rules is not None else _ENGINE.min_prefill_split
        for forward in plan_prefill_forwards(tokens, split) if tokens else []:
            self.pending_seconds += slowdown * prefill_seconds(cost, [tokens[i] for i in forward])

    def _to_admit(self) -> list[Placed]:
        """The waiting requests the engine's scheduler would admit now, in queue order."""
        rules = self.rules
        if rules is None:
            return list(self.waiting)
        free = rules.num_slots - self.num_in_batch
        num_waiting = len(self.waiting)
        if not num_waiting or not is_admission_due(
            self.num_in_batch, free, num_waiting, rules.num_slots, rules.admit_fraction
        ):
            return []
        queued = [p.prefill_tokens for p in self.waiting[:free]]
        return self.waiting[: num_to_admit(queued, free, rules.max_prefill_tokens)]

    def _start(self, placed: Placed) -> None:
        end = placed.stop
        if self.output_lengths is not None:
            end = min(end, float(self.output_lengths[placed.request_id]))
        position = min(placed.position + 1.0, end) if placed.prefill_tokens > 0 else placed.position
        self.request_ids = np.append(self.request_ids, placed.request_id)
        self.drafters = np.append(self.drafters, placed.drafter)
        self.positions = np.append(self.positions, position)
        self.stops = np.append(self.stops, end)
        self.reserved_stops = np.append(self.reserved_stops, placed.stop)

    def remove(self, mask: np.ndarray) -> None:
        keep = ~mask
        self.request_ids, self.drafters = self.request_ids[keep], self.drafters[keep]
        self.positions, self.stops = self.positions[keep], self.stops[keep]
        self.reserved_stops = self.reserved_stops[keep]

    def reached_stop(self) -> np.ndarray:
        return self.positions >= self.stops - _EPS

    def plan(
        self,
        view: RunningBatch,
        strategy: SpeculationStrategy,
        max_iters: int,
        is_growing_kv: bool,
        slowdown: float = 1.0,
    ) -> float:
        """Plan the next segment from time_seconds, every iteration `slowdown` times as long as the
        strategy's cost says; returns its end time (inf when idle)."""
        if self.num_in_batch == 0:
            self.segment, self.pending_seconds = None, 0.0
            return math.inf
        plan = strategy.decide(view)
        iters = self._iterations(plan, max_iters, is_growing_kv)
        growth = float(np.sum(plan.tokens_per_iter))
        iteration_seconds = slowdown * plan.latency_seconds(self._positions_read() + growth * iters / 2.0)
        strategy.observe(view, plan, iteration_seconds)
        start = self.time_seconds + self.pending_seconds
        self.segment = Segment(
            start, start + iters * iteration_seconds, iteration_seconds, plan.tokens_per_iter
        )
        return self.segment.end_seconds

    def _batch_context(self) -> float:
        return float(np.sum(self.positions + self._prompts(self.request_ids)))

    def _positions_read(self) -> float:
        """Cached positions one forward reads: the batch's context, or under the engine's rules its
        attention chunks' rows each padded to the chunk's longest."""
        if self.rules is None:
            return self._batch_context()
        rows = self.positions + self._prompts(self.request_ids)  # (b,) each row's context
        return float(sum(c.positions_read for c in plan_chunks([int(r) + 1 for r in rows]))) - len(rows)

    def _iterations(self, plan: IterationPlan, max_iters: int, is_growing_kv: bool) -> int:
        if self.reached_stop().any():
            return 0  # re-planned at the instant a request stops (another worker's event): retire it first
        to_stop = np.ceil((self.stops - self.positions) / plan.tokens_per_iter - _EPS)
        iters = int(max(1, min(float(to_stop.min()), max_iters)))
        if is_growing_kv:  # vLLM-style: the batch may grow past the KV cache and preempt
            room = self.kv_capacity - self._batch_context()
            iters = max(1, min(iters, int(room / float(np.sum(plan.tokens_per_iter)))))
        return iters
