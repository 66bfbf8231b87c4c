"""DAS length-aware speculative budgets (DAS §4.2.2, eq. 3-9). Imports no torch.

Request i, expected to emit l_i more tokens, proposing p_i draft tokens over its remaining life,
has A_i(p_i) = k_i l_i (1 - exp(-alpha_i p_i / l_i)) of them accepted (eq. 3): k_i is the largest
fraction of its tokens drafts can supply, alpha_i the efficiency of the first proposals. The batch
needs N = max_i l_i - A_i(p_i) forwards (eq. 4) and costs c_base N + c_tok sum_i p_i (eq. 6).
With every constraint tight, solving l_i - A_i(p_i) = N for p_i gives

    p_i(N) = -(l_i / alpha_i) ln(1 - (1 - N / l_i) / k_i)   for N < l_i, else 0.

(The paper prints ln(1 - k_i (1 - N / l_i)) in eq. 7; that is the same only when k_i = 1, and the
form above is the one that satisfies eq. 4, as the numeric check in the tests confirms.)
The objective c_base N + c_tok sum_i p_i(N) is convex in N, so N* is the root of its derivative

    c_base - c_tok * sum_{i: l_i > N} 1 / (alpha_i (k_i - 1 + N / l_i)) = 0           (cf. eq. 9)

on N > max_i l_i (1 - k_i), found by bisection. Short requests (l_i <= N*) get no budget.

Mapping onto this engine: a request spreads p_i evenly over its N* forwards, drafting
round(p_i / N*) tokens per forward (at most max_draft). Under the geometric acceptance model a
request with per-token acceptance a has k_i = a (drafting without bound, a fraction a of its tokens
are accepted drafts) and alpha_i = 1 (the first proposal is accepted with probability a = k_i alpha_i);
`efficiency` overrides alpha_i. c_tok is the cost model's per-token cost at the batch's mean context.
l_i is predicted from the lengths the request's own prompt reached (`RequestView.prompt_lengths`)
where they suffice, else from those of every request finished (`lengths.LengthPredictor`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from specroll.policies.acceptance_estimates import AcceptanceTracker
from specroll.policies.base import BatchView, DraftDecision, ForwardStats, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.lengths import LengthPrediction, LengthPredictor


@dataclass(frozen=True)
class DasRequest:
    length: float  # l_i, tokens still to emit
    capacity: float  # k_i in [0, 1]
    efficiency: float = 1.0  # alpha_i > 0

    def __post_init__(self) -> None:
        if self.length < 0 or not 0.0 <= self.capacity <= 1.0 or self.efficiency <= 0:
            raise ValueError(f"invalid DAS request {self}")


@dataclass(frozen=True)
class DasSolution:
    num_forwards: float  # N*
    budgets: list[float]  # p_i*, draft tokens over each request's remaining life


def budget(request: DasRequest, num_forwards: float) -> float:
    """p_i(N): the draft tokens that bring request i's forwards down to N (0 if it needs no help)."""
    l, k, a = request.length, request.capacity, request.efficiency
    if num_forwards >= l:
        return 0.0
    inside = 1.0 - (1.0 - num_forwards / l) / k if k > 0 else 0.0
    return math.inf if inside <= 0 else -(l / a) * math.log(inside)


def cost(requests: Sequence[DasRequest], num_forwards: float, c_base: float, c_tok: float) -> float:
    """Eq. 8 without the constant C."""
    return c_base * num_forwards + c_tok * sum(budget(r, num_forwards) for r in requests)


def _slope(requests: Sequence[DasRequest], num_forwards: float, c_base: float, c_tok: float) -> float:
    terms = (
        1.0 / (r.efficiency * (r.capacity - 1.0 + num_forwards / r.length))
        for r in requests
        if r.length > num_forwards
    )
    return c_base - c_tok * sum(terms)


def solve(requests: Sequence[DasRequest], c_base: float, c_tok: float, iterations: int = 100) -> DasSolution:
    """The budgets minimising c_base N + c_tok sum_i p_i subject to eq. 4."""
    longest = max((r.length for r in requests), default=0.0)
    floor = max((r.length * (1.0 - r.capacity) for r in requests), default=0.0)
    if longest <= 0 or floor >= longest:
        return DasSolution(longest, [0.0] * len(requests))  # no draft can shorten the batch
    if c_tok <= 0:  # free drafts: draft without bound
        return DasSolution(floor, [budget(r, floor) for r in requests])
    low, high = floor, longest  # slope < 0 just above floor, = c_base >= 0 at longest
    for _ in range(iterations):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if _slope(requests, mid, c_base, c_tok) < 0 else (low, mid)
    return DasSolution(high, [budget(r, high) for r in requests])


def per_forward_drafts(solution: DasSolution, max_draft: int) -> list[int]:
    """round(p_i / N*) per forward, capped; an unbounded budget drafts max_draft."""

    def per_forward(p: float) -> int:
        if p <= 0:
            return 0
        if math.isinf(p) or solution.num_forwards <= 0:
            return max_draft
        return min(max_draft, round(p / solution.num_forwards))

    return [per_forward(p) for p in solution.budgets]


@dataclass
class DasPolicy:
    cost_model: CostModel
    efficiency: float = 1.0
    lengths: LengthPredictor = field(default_factory=LengthPredictor)
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "das"

    def __post_init__(self) -> None:
        if self.efficiency <= 0:
            raise ValueError(f"efficiency must be > 0, got {self.efficiency}")

    def decide(self, batch: BatchView) -> DraftDecision:
        self.tracker.update(batch)
        requests = [self._request(v) for v in batch.requests]
        context = sum(v.num_context_tokens or v.num_output_tokens for v in batch.requests) / max(
            1, batch.batch_size
        )
        c_tok = self.cost_model.c_tok + self.cost_model.c_ctx * context
        return DraftDecision(
            tuple(per_forward_drafts(solve(requests, self.cost_model.c_base, c_tok), batch.max_draft))
        )

    def _request(self, view: RequestView) -> DasRequest:
        predicted = self._predicted(view)
        return DasRequest(predicted.num_remaining, self.tracker.alpha(view.request_id), self.efficiency)

    def _predicted(self, view: RequestView) -> LengthPrediction:
        """Its remaining length by its own prompt's lengths (DAS §4.2.3 keeps a history per problem),
        or, where those are too few or none ran past it, by every finished request's."""
        own = self.lengths.predict(view.prompt_lengths, view.num_output_tokens, view.num_remaining)
        if own.length_class != "unknown":
            return own
        return self.lengths.predict(self.tracker.finished_lengths, view.num_output_tokens, view.num_remaining)

    def observe(self, stats: ForwardStats) -> None:
        pass

    def new_target(self) -> None:
        self.tracker.new_target()
