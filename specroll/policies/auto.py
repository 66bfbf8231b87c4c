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
from typing import Sequence

from specroll.policies.acceptance import AcceptanceTracker
from specroll.policies.base import BatchView, StepStats
from specroll.policies.cost_model import CostModel, expected_tokens


def padded_draft_lengths(model: CostModel, alphas: Sequence[float], limits: Sequence[int],
                         context_length: float = 0.0) -> list[int]:
    """The best common cap c; request i drafts min(c, limits[i]). Ties go to the shorter cap."""
    def rate(cap: int) -> float:
        lengths = [min(cap, limit) for limit in limits]
        tokens = sum(expected_tokens(a, k) for a, k in zip(alphas, lengths))
        return tokens / model.step_seconds(len(alphas), max(lengths, default=0), context_length)

    best = max(range(max(limits, default=0) + 1), key=lambda cap: (rate(cap), -cap))
    return [min(best, limit) for limit in limits]


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
    alpha 0.50 where drafting every step measured 0.76, so `auto` wrongly kept decoding plain."""

    cost_model: CostModel
    padded: bool = True  # this engine pads every row to the widest draft
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "auto"
    warmup_trials: int = 64
    probe_every: int = 16
    probe_length: int = 2
    num_steps: int = 0
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def draft_lengths(self, batch: BatchView) -> list[int]:
        self.num_steps += 1
        lengths = self._best_lengths(batch)
        if any(lengths) or not self._should_probe():
            return lengths
        return [max(0, min(self.probe_length, batch.max_draft, v.num_remaining - 1)) for v in batch.requests]

    def _should_probe(self) -> bool:
        is_probe_step = self._rng.random() * self.probe_every < 1.0
        return self.tracker.pooled_trials < self.warmup_trials or is_probe_step

    def _best_lengths(self, batch: BatchView) -> list[int]:
        self.tracker.update(batch)
        alphas = [self.tracker.alpha(v.request_id) for v in batch.requests]
        limits = [max(0, min(batch.max_draft, v.num_remaining - 1)) for v in batch.requests]
        contexts = [float(v.num_context_tokens or v.num_output_tokens) for v in batch.requests]
        if not self.padded:
            return unpadded_draft_lengths(self.cost_model, alphas, limits, contexts)
        mean_context = sum(contexts) / len(contexts) if contexts else 0.0
        return padded_draft_lengths(self.cost_model, alphas, limits, mean_context)

    def observe(self, stats: StepStats) -> None:
        pass
