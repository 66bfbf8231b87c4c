"""`auto`: per-request draft lengths that maximise the batch's expected tokens per second.

Imports no torch. Each request's per-token acceptance alpha_i comes from its own live acceptance
(`AcceptanceTracker`, shrunk toward the batch's while it has few samples). A forward emits
E_i(k_i) = (1 - alpha_i^(k_i+1)) / (1 - alpha_i) tokens for request i, and the cost model predicts
the step's seconds; `auto` picks the k_i in 0..min(max_draft, num_remaining - 1) maximising
sum_i E_i(k_i) / seconds.

Padded rows (this engine): every row of a forward is as wide as the widest draft, and a draft model
drafts all rows for as many rounds as the longest draft, so the step's time depends only on the cap
c = max_i k_i. For a fixed c each E_i grows with k_i, so k_i = min(c, limit_i) is optimal, and the
search is over c alone (c = 0, plain decoding, included: large batches with low acceptance fall back
to it). Lowering a request below the cap saves nothing here.

Unpadded rows (a runner that packs rows by their true width): the step costs a base plus a price
per token, so each draft token is an item with gain alpha_i^j (its chance of being emitted) and
price c_row. Adding an item raises the ratio iff gain / price exceeds the current ratio; items of one
request come in falling order of gain, so taking them greedily by gain / price until one fails is
optimal (a ratio of a concave sum to a linear cost).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from specroll.policies.acceptance import AcceptanceTracker
from specroll.policies.calibration import StepTimeCalibration
from specroll.policies.base import BatchView, StepStats
from specroll.policies.cost_model import CostModel, expected_tokens


def padded_draft_lengths(model: CostModel, alphas: Sequence[float], limits: Sequence[int],
                         context_length: float = 0.0,
                         time_scale: Callable[[int], float] = lambda cap: 1.0) -> list[int]:
    """The best common cap c; request i drafts min(c, limits[i]). Ties go to the shorter cap.
    time_scale(c) corrects the model's step time for cap c (`StepTimeCalibration`)."""
    limit = np.asarray(limits, dtype=np.int64)
    top = int(limit.max(initial=0))
    # emitted[i, k]: expected tokens of request i drafting k, sum_{j<=k} alpha_i^j
    emitted = np.cumsum(np.asarray(alphas, dtype=np.float64)[:, None] ** np.arange(top + 1)[None], axis=1)
    rows = np.arange(len(limit))

    def rate(cap: int) -> float:
        lengths = np.minimum(cap, limit)
        width = int(lengths.max(initial=0))
        seconds = model.step_seconds(len(limit), width, context_length) * time_scale(width)
        return float(emitted[rows, lengths].sum()) / seconds

    rates = [rate(cap) for cap in range(top + 1)]
    best = max(range(top + 1), key=lambda cap: (rates[cap], -cap))
    return [min(best, k) for k in limits]


def unpadded_draft_lengths(model: CostModel, alphas: Sequence[float], limits: Sequence[int],
                           contexts: Sequence[float]) -> list[int]:
    """Greedy by gain / price over single draft tokens; exact for a linear cost."""
    b = len(alphas)
    prices = [model.c_tok + model.c_ctx * ctx + model.draft_base / max(1, b) + model.draft_row for ctx in contexts]
    seconds = model.c_base + sum(model.c_row + model.c_row_ctx * ctx + model.c_tok + model.c_ctx * ctx
                                 for ctx in contexts)
    tokens = float(b)
    items = sorted(((alphas[i] ** j / prices[i], i) for i in range(b) for j in range(1, limits[i] + 1)),
                   reverse=True)
    lengths = [0] * b
    for ratio, i in items:
        if ratio <= tokens / seconds:
            break
        lengths[i] += 1
        tokens += alphas[i] ** lengths[i]
        seconds += prices[i]
    return lengths


@dataclass
class AutoPolicy:
    """Exploration: the acceptance of a drafter on a workload is unknown until it drafts, and a prior
    that predicts a loss would never be corrected. So until `warmup_trials` draft tokens have been
    tried, and then on one step in `probe_every` on average, a step the model would run plain drafts
    `probe_length` tokens instead: a bounded cost that keeps the estimates live.

    Probe steps are drawn at random (seeded), not every `probe_every`-th step: outputs have periodic
    structure, and a fixed period resonates with it. On the bundled task (8 tokens per line, batches
    moving in step) probing every 16th step always drafted at the same place in a line and measured
    alpha 0.50 where drafting every step measured 0.76, so `auto` wrongly kept decoding plain.

    No margin over plain decoding is asked of drafting: one of the cost model's fit error (12%) was
    tried and at batch 32 auto then drafted too little (0.94x of plain decoding where no margin gave
    1.14x, in one interleaved pair of runs).

    Step times: the cost model's predictions are corrected by measured step times
    (`StepTimeCalibration`). Probe steps are left out of it: they run where the policy would not
    and a draft model catching up on the skipped steps makes them slower than steady drafting.
    The other way round, while a batch-size bucket drafts and has no plain step measured, one
    step in `probe_every` on average decodes plain, so that the comparison has both sides."""

    cost_model: CostModel
    padded: bool = True  # this engine pads every row to the widest draft
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "auto"
    warmup_trials: int = 64
    probe_every: int = 16
    probe_length: int = 2
    num_steps: int = 0
    seed: int = 0
    calibration: StepTimeCalibration = field(default_factory=StepTimeCalibration)
    _rng: random.Random = field(init=False, repr=False)
    _decided: tuple[int, int, float] | None = field(default=None, init=False, repr=False)  # b, cap, predicted
    _context: float = field(default=0.0, init=False, repr=False)  # mean context of the last decision

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def draft_lengths(self, batch: BatchView) -> list[int]:
        self.num_steps += 1
        lengths = self._best_lengths(batch)
        self._decided = None
        is_probe_step = self._rng.random() * self.probe_every < 1.0
        if not any(lengths) and (is_probe_step or self.tracker.pooled_trials < self.warmup_trials):
            return [max(0, min(self.probe_length, batch.max_draft, v.num_remaining - 1)) for v in batch.requests]
        if any(lengths) and is_probe_step and not self.calibration.is_measured(batch.batch_size, is_drafting=False):
            lengths = [0] * len(lengths)
        cap = max(lengths, default=0)
        self._decided = (batch.batch_size, cap, self.cost_model.step_seconds(batch.batch_size, cap, self._context))
        return lengths

    def _best_lengths(self, batch: BatchView) -> list[int]:
        self.tracker.update(batch)
        alphas = [self.tracker.alpha(v.request_id) for v in batch.requests]
        limits = [max(0, min(batch.max_draft, v.num_remaining - 1)) for v in batch.requests]
        contexts = [float(v.num_context_tokens or v.num_output_tokens) for v in batch.requests]
        self._context = sum(contexts) / len(contexts) if contexts else 0.0
        if not self.padded:
            return unpadded_draft_lengths(self.cost_model, alphas, limits, contexts)
        b = batch.batch_size
        return padded_draft_lengths(self.cost_model, alphas, limits, self._context,
                                    lambda cap: self.calibration.scale(b, cap))

    def observe(self, stats: StepStats) -> None:
        if self._decided is not None:
            batch_size, cap, predicted = self._decided
            self.calibration.record(batch_size, cap, predicted, stats.forward_seconds + stats.draft_seconds)
