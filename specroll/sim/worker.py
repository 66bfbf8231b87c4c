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

from specroll.sim.speculation import BatchView, SpeculationStrategy, Step

_EPS = 1e-6


@dataclass
class Segment:
    start_s: float  # decoding starts here (after any prefill)
    end_s: float
    iter_s: float
    tokens_per_iter: np.ndarray  # (b,)


class Worker:
    def __init__(self, index: int, num_gpus: int, kv_capacity: float, max_num_seqs: int, prompt_tokens: int):
        self.index = index
        self.num_gpus = num_gpus
        self.kv_capacity = kv_capacity
        self.max_num_seqs = max_num_seqs
        self.prompt_tokens = prompt_tokens
        self.time_s = 0.0
        self.busy_s = 0.0
        self.pending_prefill_s = 0.0
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

    def sync(self, now_s: float) -> None:
        """Advance positions and busy time to now_s, inside the current segment."""
        if self.segment is not None and now_s > self.segment.start_s:
            done = min(now_s, self.segment.end_s) - max(self.time_s, self.segment.start_s)
            if done > 0:
                gained = self.segment.tokens_per_iter * (done / self.segment.iter_s)
                self.positions = np.minimum(self.positions + gained, self.stops)
        if self.num_running:
            self.busy_s += max(now_s - self.time_s, 0.0)
        if self.segment is not None:
            self.pending_prefill_s = max(self.segment.start_s - now_s, 0.0)
        self.time_s = max(self.time_s, now_s)

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_s: float) -> None:
        self.request_ids = np.append(self.request_ids, request_id)
        self.drafters = np.append(self.drafters, drafter)
        self.positions = np.append(self.positions, position)
        self.stops = np.append(self.stops, stop)
        self.pending_prefill_s += prefill_s

    def remove(self, mask: np.ndarray) -> None:
        keep = ~mask
        self.request_ids, self.drafters = self.request_ids[keep], self.drafters[keep]
        self.positions, self.stops = self.positions[keep], self.stops[keep]

    def reached_stop(self) -> np.ndarray:
        return self.positions >= self.stops - _EPS

    def plan(self, view: BatchView, strategy: SpeculationStrategy, max_iters: int, is_growing_kv: bool) -> float:
        """Plan the next segment from time_s; returns its end time (inf when idle)."""
        if self.num_running == 0:
            self.segment, self.pending_prefill_s = None, 0.0
            return math.inf
        step = strategy.step(view)
        iters = self._iterations(step, max_iters, is_growing_kv)
        growth = float(np.sum(step.tokens_per_iter))
        iter_s = step.latency_s(self.context_tokens() + growth * iters / 2.0)
        strategy.observe(view, step, iter_s)
        start = self.time_s + self.pending_prefill_s
        self.segment = Segment(start, start + iters * iter_s, iter_s, step.tokens_per_iter)
        return self.segment.end_s

    def _iterations(self, step: Step, max_iters: int, is_growing_kv: bool) -> int:
        to_stop = np.ceil((self.stops - self.positions) / step.tokens_per_iter - _EPS)
        iters = int(max(1, min(float(to_stop.min()), max_iters)))
        if is_growing_kv:  # vLLM-style: the batch may grow past the KV cache and preempt
            room = self.kv_capacity - self.context_tokens()
            iters = max(1, min(iters, int(room / float(np.sum(step.tokens_per_iter)))))
        return iters
