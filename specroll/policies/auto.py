"""`auto`: per-request draft lengths that maximise the batch's expected tokens per second.

Imports no torch. Each request's per-token acceptance alpha_i comes from its own live acceptance
(`AcceptanceTracker`, shrunk toward the batch's while it has few samples). A forward emits
E_i(k_i) = (1 - alpha_i^(k_i+1)) / (1 - alpha_i) tokens for request i, and the cost model predicts
the forward's seconds; `auto` picks the k_i in 0..min(max_draft, num_remaining - 1) maximising
sum_i E_i(k_i) / seconds.

Every row of a forward is as wide as the widest draft, and a draft model drafts all rows for as many
rounds as the longest draft, so the forward's time depends only on the cap c = max_i k_i. For a fixed c
each E_i grows with k_i, so k_i = min(c, limit_i) is optimal, and the search is over c alone (c = 0,
plain decoding, included: large batches with low acceptance fall back to it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from specroll.policies.acceptance import AcceptanceTracker
from specroll.policies.calibration import ForwardTimeCalibration
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.policies.speculation_math import expected_tokens


def padded_draft_lengths(
    model: CostModel,
    alphas: Sequence[float],
    limits: Sequence[int],
    context_length: float = 0.0,
    time_scale: Callable[[int], float] = lambda cap: 1.0,
) -> list[int]:
    """The best common cap c; request i drafts min(c, limits[i]). Ties go to the shorter cap.
    time_scale(c) corrects the model's forward time for cap c (`ForwardTimeCalibration`)."""
    limit = np.asarray(limits, dtype=np.int64)
    top = int(limit.max(initial=0))
    # emitted[i, k]: expected tokens of request i drafting k
    emitted = expected_tokens(np.asarray(alphas, dtype=np.float64)[:, None], np.arange(top + 1)[None])
    rows = np.arange(len(limit))

    def rate(cap: int) -> float:
        lengths = np.minimum(cap, limit)
        width = int(lengths.max(initial=0))
        seconds = model.step_seconds(len(limit), width, context_length) * time_scale(width)
        return float(emitted[rows, lengths].sum()) / seconds

    rates = [rate(cap) for cap in range(top + 1)]
    best = max(range(top + 1), key=lambda cap: (rates[cap], -cap))
    return [min(best, k) for k in limits]


@dataclass
class AutoPolicy:
    """Exploration: the acceptance of a drafter on a workload is unknown until it drafts, and a prior
    that predicts a loss would never be corrected. So until `warmup_trials` draft tokens have been
    tried, and then on one forward in `probe_every` on average, a forward the model would run plain drafts
    `probe_length` tokens instead: a bounded cost that keeps the estimates live. Where the cost model
    predicts a probe forward to cost much more than a plain one (large batches on a CPU, where width
    costs nearly its size), probes are rarer, so that they cost at most `max_probe_overhead` of the
    plain forwards' time on average; and the measured cost holds them to that too: after warm-up, no
    probe runs while the probes' measured seconds beyond a plain forward's exceed `max_probe_overhead`
    of the plain forwards' measured seconds (a probe also pays verification over the vocabulary for
    every draft position, which a profile of forwards does not see).

    Probe forwards are drawn at random (seeded), not every `probe_every`-th forward: outputs have periodic
    structure, and a fixed period can resonate with it, always measuring alpha at the same place.

    No margin over plain decoding is asked of drafting: the comparison is the cost model's expected
    tokens per second, corrected by measured forward times.

    Forward times: the cost model's predictions are corrected by measured times
    (`ForwardTimeCalibration`). Probe forwards are left out of it: they run where the policy would not
    and a draft model catching up on the skipped forwards makes them slower than steady drafting.
    The other way round, while a batch-size bucket drafts and has no plain forward measured, one
    forward in `probe_every` on average decodes plain, so that the comparison has both sides. And once
    it has, while the next cap up (c + 1) is unmeasured in that bucket, one forward in `probe_every`
    drafts to it: an unmeasured cap borrows its correction from the measured ones, so a profile that
    overprices width (taken at another thread count, or without the engine's own per-forward work)
    would otherwise keep auto below a longer draft that pays, never measuring it. Measured, the caps
    next to the chosen one are re-measured on one probe step in four each (one forward in 64), so a
    measurement taken while the machine was busier (or a shape's first, slower forwards) does not
    settle the choice for good."""

    cost_model: CostModel
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "auto"
    warmup_trials: int = 64
    probe_every: int = 16
    probe_length: int = 2
    max_probe_overhead: float = 0.01
    seed: int = 0
    calibration: ForwardTimeCalibration = field(default_factory=ForwardTimeCalibration)
    _rng: random.Random = field(init=False, repr=False)
    _decided: tuple[int, int, float] | None = field(default=None, init=False, repr=False)  # b, cap, predicted
    _context: float = field(default=0.0, init=False, repr=False)  # mean context of the last decision
    _probe_plain: float | None = field(
        default=None, init=False, repr=False
    )  # a probe's seconds had it run plain
    _probe_extra_seconds: float = field(default=0.0, init=False, repr=False)  # measured, over all probes
    _plain_seconds: float = field(default=0.0, init=False, repr=False)  # measured, over plain forwards

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def decide(self, batch: BatchView) -> DraftDecision:
        return DraftDecision(tuple(self._draft_lengths(batch)))

    def new_target(self) -> None:
        """Acceptance is measured again from a warm-up; forward times still hold and are kept."""
        self.tracker.new_target()

    def _draft_lengths(self, batch: BatchView) -> list[int]:
        lengths = self._best_lengths(batch)
        self._decided, self._probe_plain = None, None
        draw = self._rng.random()
        is_probe_step = draw * self.probe_every < 1.0
        b = batch.batch_size
        if not any(lengths) and (
            self.tracker.pooled_trials < self.warmup_trials
            or (draw < self._probe_rate(b) and self._within_probe_budget())
        ):
            self._probe_plain = self.cost_model.step_seconds(b, 0, self._context) * self.calibration.scale(
                b, 0
            )
            return batch.clip([self.probe_length] * b)
        if any(lengths) and is_probe_step:
            if not self.calibration.is_measured(b, is_drafting=False):
                lengths = [0] * len(lengths)
            else:
                limits = batch.draft_limits()
                neighbour = self._neighbour_cap(b, max(lengths), limits, draw * self.probe_every)
                lengths = lengths if neighbour is None else [min(neighbour, k) for k in limits]
        cap = max(lengths, default=0)
        self._decided = (
            batch.batch_size,
            cap,
            self.cost_model.step_seconds(batch.batch_size, cap, self._context),
        )
        return lengths

    def _neighbour_cap(self, batch_size: int, cap: int, limits: list[int], u: float) -> int | None:
        """The cap a probe step drafts to instead of `cap`, if any: the next cap up while it is
        unmeasured in this bucket, else (u uniform in [0, 1)) the next one up for u < 1/4 and the next
        one down (to 1) for 1/4 <= u < 1/2, so both neighbours' measurements stay current."""
        up = cap + 1 if cap < max(limits) else None
        down = cap - 1 if cap > 1 else None
        if up is not None and not self.calibration.is_measured_cap(batch_size, up):
            return up
        return up if u < 0.25 else down if u < 0.5 else None

    def _within_probe_budget(self) -> bool:
        return self._probe_extra_seconds <= self.max_probe_overhead * self._plain_seconds

    def _probe_rate(self, batch_size: int) -> float:
        """How often a plain forward becomes a probe: 1 / probe_every, or less where a probe forward's
        predicted extra time would make probing cost more than `max_probe_overhead`."""
        plain = self.cost_model.step_seconds(batch_size, 0, self._context)
        extra = self.cost_model.step_seconds(batch_size, self.probe_length, self._context) / plain - 1.0
        return (
            min(1.0 / self.probe_every, self.max_probe_overhead / extra)
            if extra > 0
            else 1.0 / self.probe_every
        )

    def _best_lengths(self, batch: BatchView) -> list[int]:
        self.tracker.update(batch)
        alphas = [self.tracker.alpha(v.request_id) for v in batch.requests]
        limits = batch.draft_limits()
        contexts = [float(v.num_context_tokens or v.num_output_tokens) for v in batch.requests]
        self._context = sum(contexts) / len(contexts) if contexts else 0.0
        b = batch.batch_size
        return padded_draft_lengths(
            self.cost_model, alphas, limits, self._context, lambda cap: self.calibration.scale(b, cap)
        )

    def observe(self, stats: ForwardStats) -> None:
        seconds = stats.forward_seconds + stats.draft_seconds
        if self._probe_plain is not None:
            self._probe_extra_seconds += max(0.0, seconds - self._probe_plain)
        elif self._decided is not None and self._decided[1] == 0:
            self._plain_seconds += seconds
        if self._decided is not None:
            batch_size, cap, predicted = self._decided
            self.calibration.record(batch_size, cap, predicted, stats.forward_seconds + stats.draft_seconds)
