"""How a worker's running batch turns into tokens per iteration and seconds per iteration.

Every strategy decides, for a `RunningBatch`, an `IterationPlan`: the expected output tokens each
running copy gains per iteration, and the iteration latency as a function of the batch's KV context (the loop evaluates it
at the segment's mid-point context). Acceptance is i.i.d. per token (speculation_math), so expected
tokens per forward with draft length k is (1 - alpha^(k+1)) / (1 - alpha).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from specroll.scheduling.adaptive_range import AdaptiveDraftRange
from specroll.scheduling.bandit import BucketedEpsilonGreedy, ElasticThreshold
from specroll.scheduling.draft_budget import draft_lengths, optimal_budgets, optimal_num_forwards
from specroll.scheduling.placement import AffineLatency, DecoupledPlan, RequestPlan, reconfigure
from specroll.scheduling.speculation_math import decoupled_expected_tokens, expected_tokens_per_forward
from specroll.sim.cost_model import ForwardCost


@dataclass(frozen=True)
class RunningBatch:
    request_ids: np.ndarray  # (b,)
    drafters: np.ndarray  # (b,) drafter index of each running copy
    acceptance: np.ndarray  # (b,) current per-token acceptance of that drafter for that request
    positions: np.ndarray  # (b,) output tokens generated so far
    predicted_lengths: np.ndarray  # (b,) length predicted from earlier steps (DAS history)
    finished_siblings: np.ndarray  # (b,) finished requests in the same group
    max_tokens: int

    @property
    def num_running(self) -> int:
        return len(self.request_ids)


@dataclass(frozen=True)
class IterationPlan:
    tokens_per_iter: np.ndarray  # (b,) expected output tokens per iteration
    draft_len: np.ndarray  # (b,) drafted tokens per iteration (0: plain decoding)
    latency_seconds: Callable[[float], float]  # context tokens -> seconds per iteration


@dataclass(frozen=True)
class SpecCosts:
    """Target and drafter costs of one worker; drafters indexed like AcceptanceModel.drafters."""

    target: ForwardCost
    drafters: tuple[ForwardCost | None, ...]  # None: model-free drafter
    cpu_draft_seconds: tuple[float, ...]

    def draft_forward_seconds(self, drafter: int, num_seqs: int, context_tokens: float) -> float:
        model = self.drafters[drafter]
        if model is None:
            return self.cpu_draft_seconds[drafter]
        return model.forward_seconds(num_seqs, 1, context_tokens)

    def coupled_latency(self, draft_len: np.ndarray, drafters: np.ndarray, context: float) -> float:
        """Draft k tokens with every drafter in the batch, then verify k+1 tokens per sequence."""
        b = len(draft_len)
        verify = self.target.forward_seconds(b, float(np.mean(draft_len)) + 1.0, context)
        return verify + self._drafting_s(draft_len, drafters, context)

    def _drafting_s(self, draft_len: np.ndarray, drafters: np.ndarray, context: float) -> float:
        """A model drafter runs one forward per drafted token; a model-free one answers in one lookup.

        Suffix-tree and n-gram drafters find the longest match once, then propose the whole draft along
        the matched path (DAS §4.1.2, Seer §4.4), so their cost does not grow with the draft length.
        """
        total, b = 0.0, len(draft_len)
        for drafter in np.unique(drafters[draft_len > 0]):
            mine = drafters == drafter
            steps = int(draft_len[mine].max()) if self.drafters[drafter] is not None else 1
            total += steps * self.draft_forward_seconds(int(drafter), int(mine.sum()), context * mine.sum() / b)
        return total


class SpeculationStrategy(Protocol):
    def decide(self, view: RunningBatch) -> IterationPlan: ...
    def observe(self, view: RunningBatch, plan: IterationPlan, iteration_seconds: float) -> None: ...


class _NoFeedback:
    def observe(self, view: RunningBatch, plan: IterationPlan, iteration_seconds: float) -> None:
        pass


@dataclass
class PlainDecoding(_NoFeedback):
    costs: SpecCosts

    def decide(self, view: RunningBatch) -> IterationPlan:
        b = view.num_running
        return IterationPlan(np.ones(b), np.zeros(b, dtype=np.int64), lambda ctx: self.costs.target.forward_seconds(b, 1, ctx))


def _coupled_plan(costs: SpecCosts, view: RunningBatch, draft_len: np.ndarray, acceptance: np.ndarray) -> IterationPlan:
    tokens = expected_tokens_per_forward(acceptance, draft_len)
    return IterationPlan(tokens, draft_len, lambda ctx: costs.coupled_latency(draft_len, view.drafters, ctx))


@dataclass
class CoupledSpeculation(_NoFeedback):
    """Vanilla speculation: every request drafts a fixed k, then verifies (SpecActor §3, Fig. 4)."""

    costs: SpecCosts
    draft_len: int

    def decide(self, view: RunningBatch) -> IterationPlan:
        k = np.full(view.num_running, self.draft_len, dtype=np.int64)
        return _coupled_plan(self.costs, view, k, view.acceptance)


@dataclass
class DecoupledSpeculation(_NoFeedback):
    """SpecActor §4.1: the drafter runs on its own GPUs up to a window w ahead of the verifier.

    A window costs max(w D(b), V(b)) and yields tau_w tokens. With reconfiguration (Algorithm 2),
    requests below the batch's mean acceptance switch to the window and mode best for them at b=1.
    """

    costs: SpecCosts  # target: the verifier on g_v GPUs; drafters: on the g_d draft GPUs
    plan: DecoupledPlan
    is_reconfigured: bool
    draft_affine: AffineLatency
    verify_affine: Callable[[int], AffineLatency]
    _table: dict[int, RequestPlan] = field(default_factory=dict)

    def decide(self, view: RunningBatch) -> IterationPlan:
        windows = np.full(view.num_running, self.plan.window, dtype=np.int64)
        coupled = np.zeros(view.num_running, dtype=bool)
        if self.is_reconfigured and view.num_running > 1:
            windows, coupled = self._reconfigured(view.acceptance, windows, coupled)
        tokens = np.where(
            coupled,
            expected_tokens_per_forward(view.acceptance, windows),
            decoupled_expected_tokens(view.acceptance, windows),
        )
        return IterationPlan(tokens, windows, lambda ctx: self._latency(view, windows, coupled, ctx))

    def _reconfigured(self, acceptance: np.ndarray, windows: np.ndarray, coupled: np.ndarray):
        below = acceptance < acceptance.mean()
        for index in np.flatnonzero(below):
            plan = self._request_plan(float(acceptance[index]))
            windows[index], coupled[index] = plan.window, plan.is_coupled
        return windows, coupled

    def _request_plan(self, p: float) -> RequestPlan:
        key = int(round(p * 100))  # Algorithm 2 re-run on a 1% grid of acceptance rates, cached
        if key not in self._table:
            found = reconfigure(np.array([key / 100.0, 1.0]), self.plan, self.draft_affine, self.verify_affine)
            self._table[key] = found[0] or RequestPlan(self.plan.window, False)
        return self._table[key]

    def _latency(self, view: RunningBatch, windows: np.ndarray, coupled: np.ndarray, ctx: float) -> float:
        b = view.num_running
        verify = self.costs.target.forward_seconds(b, float(np.mean(windows)) + 1.0, ctx)
        ahead = np.where(coupled, 0, windows)
        drafting_ahead = self.costs._drafting_s(ahead, view.drafters, ctx)
        drafting_inline = self.costs._drafting_s(np.where(coupled, windows, 0), view.drafters, ctx)
        return max(drafting_ahead, verify) + drafting_inline


@dataclass
class GroupedAdaptiveSpeculation(_NoFeedback):
    """Seer §4.4: suffix-tree drafts from the whole group, draft length set by concurrency.

    Acceptance grows with the finished siblings the group's tree holds (Seer Table 2); `bonus`
    maps that count to the gain in per-token acceptance over a tree with no sibling.
    """

    costs: SpecCosts
    draft_range: AdaptiveDraftRange
    bonus: Callable[[np.ndarray], np.ndarray]

    def decide(self, view: RunningBatch) -> IterationPlan:
        k = np.full(view.num_running, self.draft_range.draft_len(view.num_running), dtype=np.int64)
        acceptance = np.clip(view.acceptance + self.bonus(view.finished_siblings), 0.0, 0.99)
        return _coupled_plan(self.costs, view, k, acceptance)


@dataclass
class LengthAwareSpeculation(_NoFeedback):
    """DAS §4.2: per-request budgets from eq. 7 and 9, long predicted requests draft the most.

    Requests that outgrow their predicted length are re-classed as long (§4.2.3 runtime update):
    their prediction becomes max_tokens.
    """

    costs: SpecCosts
    efficiency: float  # DAS a_i, the accept efficiency of the budget model
    max_draft: int

    def decide(self, view: RunningBatch) -> IterationPlan:
        predicted = np.where(view.positions < view.predicted_lengths, view.predicted_lengths, view.max_tokens)
        remaining = np.maximum(predicted - view.positions, 1.0)
        context = float(np.sum(view.positions))
        k = np.full(view.num_running, self.max_draft, dtype=np.int64)
        for _ in range(self.num_refits):
            k = self._draft_lengths(remaining, view.acceptance, *self._linearised_costs(k, context))
        return _coupled_plan(self.costs, view, k, view.acceptance)

    num_refits = 3

    def _draft_lengths(self, remaining: np.ndarray, acceptance: np.ndarray, c_base: float, c_tok: float) -> np.ndarray:
        capacity = np.clip(acceptance, 1e-3, 0.999)
        efficiency = np.full(len(remaining), self.efficiency)
        n_fwd = optimal_num_forwards(remaining, capacity, efficiency, c_base, c_tok)
        return draft_lengths(optimal_budgets(remaining, capacity, efficiency, n_fwd), n_fwd, self.max_draft)

    def _linearised_costs(self, draft_len: np.ndarray, context: float) -> tuple[float, float]:
        """Eq. 1 as the secant of the batch's forward between plain decoding and the current plan.

        A tangent at one token per sequence reads c_tok = 0 whenever that forward is memory-bound, so
        every draft looks free; a secant over the whole draft range overcharges the short drafts the
        optimum mostly picks. The plan and the line are refitted in turn (`num_refits` times),
        starting from the longest drafts.
        """
        b = len(draft_len)
        extra = max(float(np.mean(draft_len)), 1.0)
        plain = self.costs.target.forward_seconds(b, 1, context)
        planned = self.costs.target.forward_seconds(b, 1 + extra, context)
        c_tok = max((planned - plain) / (b * extra), 1e-12)
        return max(plain - c_tok * b, 1e-9), c_tok


@dataclass
class ElasticBanditSpeculation:
    """TLT §5.1-5.2: no speculation above the elastic threshold, else the BEG bandit's strategy."""

    costs: SpecCosts
    threshold: ElasticThreshold
    bandit: BucketedEpsilonGreedy
    _last: dict[int, object] = field(default_factory=dict)

    def decide(self, view: RunningBatch) -> IterationPlan:
        b = view.num_running
        if not self.threshold.is_active(b):
            return PlainDecoding(self.costs).decide(view)
        strategy = self.bandit.select(b)
        k = np.full(b, min(strategy.draft_depth, strategy.tokens_to_verify), dtype=np.int64)
        plan = _coupled_plan(self.costs, view, k, view.acceptance)
        self._last[id(plan)] = strategy
        return plan

    def observe(self, view: RunningBatch, plan: IterationPlan, iteration_seconds: float) -> None:
        strategy = self._last.pop(id(plan), None)
        if strategy is not None:
            accepted = float(np.sum(plan.tokens_per_iter - 1.0))
            self.bandit.record(strategy, iteration_seconds, accepted, view.num_running)


def group_bonus_from_table(ref_counts: Sequence[int], acceptance: Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """Piecewise-linear gain in acceptance over zero references, from (ref count, acceptance) points."""
    xs, ys = np.asarray(ref_counts, dtype=np.float64), np.asarray(acceptance, dtype=np.float64)
    return lambda refs: np.interp(refs, xs, ys) - ys[0]
