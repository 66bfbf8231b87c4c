"""One worker's running batch, advanced in closed form between events.

Between two events a worker's batch is fixed, so every iteration yields the same expected tokens per
copy; the number of iterations to the next finish (or chunk end, or KV overflow) is a minimum over
copies, and the segment's latency is iterations x the iteration latency at the segment's mid-point
context. `sync` advances the state to any time inside a segment (fluid approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specroll.sim.speculation import RunningBatch, SpeculationStrategy, IterationPlan

_EPS = 1e-6


@dataclass
class Segment:
    start_seconds: float  # decoding starts here (after any prefill)
    end_seconds: float
    iteration_seconds: float
    tokens_per_iter: np.ndarray  # (b,)


class Worker:
    def __init__(self, index: int, num_gpus: int, kv_capacity: float, max_num_seqs: int, prompt_tokens: int):
        self.index = index
        self.num_gpus = num_gpus
        self.kv_capacity = kv_capacity
        self.max_num_seqs = max_num_seqs
        self.prompt_tokens = prompt_tokens
        self.time_seconds = 0.0
        self.busy_seconds = 0.0
        self.pending_prefill_seconds = 0.0
        self.request_ids = np.zeros(0, dtype=np.int64)
        self.drafters = np.zeros(0, dtype=np.int64)
        self.positions = np.zeros(0)
        self.stops = np.zeros(0)  # position at which this residency ends
        self.segment: Segment | None = None
        self.version = 0

    @property
    def num_running(self) -> int:
        return len(self.request_ids)

    def context_tokens(self) -> float:
        return float(np.sum(self.positions)) + self.prompt_tokens * self.num_running

    def reserved_tokens(self) -> float:
        return float(np.sum(self.stops)) + self.prompt_tokens * self.num_running

    def sync(self, now_seconds: float) -> None:
        """Advance positions and busy time to now_seconds, inside the current segment."""
        if self.segment is not None and now_seconds > self.segment.start_seconds:
            done = min(now_seconds, self.segment.end_seconds) - max(self.time_seconds, self.segment.start_seconds)
            if done > 0:
                gained = self.segment.tokens_per_iter * (done / self.segment.iteration_seconds)
                self.positions = np.minimum(self.positions + gained, self.stops)
        if self.num_running:
            self.busy_seconds += max(now_seconds - self.time_seconds, 0.0)
        if self.segment is not None:
            self.pending_prefill_seconds = max(self.segment.start_seconds - now_seconds, 0.0)
        self.time_seconds = max(self.time_seconds, now_seconds)

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_seconds: float) -> None:
        self.request_ids = np.append(self.request_ids, request_id)
        self.drafters = np.append(self.drafters, drafter)
        self.positions = np.append(self.positions, position)
        self.stops = np.append(self.stops, stop)
        self.pending_prefill_seconds += prefill_seconds

    def remove(self, mask: np.ndarray) -> None:
        keep = ~mask
        self.request_ids, self.drafters = self.request_ids[keep], self.drafters[keep]
        self.positions, self.stops = self.positions[keep], self.stops[keep]

    def reached_stop(self) -> np.ndarray:
        return self.positions >= self.stops - _EPS

    def plan(self, view: RunningBatch, strategy: SpeculationStrategy, max_iters: int, is_growing_kv: bool) -> float:
        """Plan the next segment from time_seconds; returns its end time (inf when idle)."""
        if self.num_running == 0:
            self.segment, self.pending_prefill_seconds = None, 0.0
            return math.inf
        plan = strategy.decide(view)
        iters = self._iterations(plan, max_iters, is_growing_kv)
        growth = float(np.sum(plan.tokens_per_iter))
        iteration_seconds = plan.latency_seconds(self.context_tokens() + growth * iters / 2.0)
        strategy.observe(view, plan, iteration_seconds)
        start = self.time_seconds + self.pending_prefill_seconds
        self.segment = Segment(start, start + iters * iteration_seconds, iteration_seconds, plan.tokens_per_iter)
        return self.segment.end_seconds

    def _iterations(self, plan: IterationPlan, max_iters: int, is_growing_kv: bool) -> int:
        to_stop = np.ceil((self.stops - self.positions) / plan.tokens_per_iter - _EPS)
        iters = int(max(1, min(float(to_stop.min()), max_iters)))
        if is_growing_kv:  # vLLM-style: the batch may grow past the KV cache and preempt
            room = self.kv_capacity - self.context_tokens()
            iters = max(1, min(iters, int(room / float(np.sum(plan.tokens_per_iter)))))
        return iters
