"""How a worker's running batch turns into tokens per iteration and seconds per iteration.

Every strategy decides, for a `RunningBatch`, an `IterationPlan`: the expected output tokens each running
copy gains per iteration, and the iteration latency as a function of the batch's KV context (the loop
evaluates it at the segment's mid-point context). Acceptance is i.i.d. per token, so a copy drafting k
tokens gains `specroll.policies.speculation_math.expected_tokens(alpha, k)` per iteration.

The strategies here are the ones with no engine counterpart (plain decoding, SpecActor's decoupled
speculation, Seer's grouped drafts); every policy the engine runs drives a worker through
`engine_policy.EnginePolicySpeculation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from specroll.policies.prompt_lengths import PromptLengths
from specroll.policies.speculation_math import expected_tokens
from specroll.scheduling.adaptive_range import AdaptiveDraftRange
from specroll.scheduling.decoupled_plan import (
    DecoupledPlan,
    RequestPlan,
    best_request_plan,
    decoupled_expected_tokens,
)
from specroll.sim.roofline import ForwardCost


@dataclass(frozen=True)
class RunningBatch:
    worker: int  # index of the worker running the batch
    request_ids: np.ndarray  # (b,)
    group_ids: np.ndarray  # (b,) prompt of each request
    drafters: np.ndarray  # (b,) drafter index of each running copy
    acceptance: np.ndarray  # (b,) current per-token acceptance of that drafter for that request
    positions: np.ndarray  # (b,) output tokens generated so far
    finished_siblings: np.ndarray  # (b,) finished requests in the same group
    max_tokens: int
    prompt_tokens: int
    # what the worker's engine knows beside its batch (`BatchView`): its queue (None: not reported), the
    # lengths it finished recently, sorted, and per group the lengths that group's requests reached
    # there (`policies.prompt_lengths`, keyed by group id: a group is a prompt of this step)
    num_waiting: int | None = None
    finished_lengths: Sequence[int] = ()
    prompt_lengths: PromptLengths = field(default_factory=PromptLengths)

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
            total += steps * self.draft_forward_seconds(
                int(drafter), int(mine.sum()), context * mine.sum() / b
            )
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
        return IterationPlan(
            np.ones(b), np.zeros(b, dtype=np.int64), lambda ctx: self.costs.target.forward_seconds(b, 1, ctx)
        )


def coupled_plan(
    costs: SpecCosts, view: RunningBatch, draft_len: np.ndarray, acceptance: np.ndarray
) -> IterationPlan:
    """Each copy drafts draft_len[i] tokens, then the batch verifies them in one forward."""
    tokens = expected_tokens(acceptance, draft_len)
    return IterationPlan(tokens, draft_len, lambda ctx: costs.coupled_latency(draft_len, view.drafters, ctx))


@dataclass
class DecoupledSpeculation(_NoFeedback):
    """SpecActor §4.1: the drafter runs on its own GPUs up to a window w ahead of the verifier.

    A window costs max(w D(b), V(b)) and yields tau_w tokens. With reconfiguration (Algorithm 2, run
    at every segment: the loop re-plans at least every 1000 iterations, the paper's cadence), each
    request's window and mode are re-chosen at the worker's current batch b by the worker's cost:
    a request below the batch's mean acceptance by its own rate (Algorithm 2), the others by the
    mean (the batch's window, re-chosen as the batch shrinks; a lone request is its own mean).
    """

    costs: SpecCosts  # target: the verifier on g_v GPUs; drafters: on the g_d draft GPUs
    plan: DecoupledPlan
    is_reconfigured: bool
    draft_seconds: Callable[[int], Callable[[float], float]]  # drafter -> (b -> seconds of one draft step)
    verify_seconds: Callable[[int], Callable[[float], float]]  # w -> (b -> seconds of one verification)
    max_window: int = 16  # Algorithm 1's enumeration cap (`plan_decoupled`)
    _table: dict[tuple[int, int, int], RequestPlan] = field(default_factory=dict)
    _drafts: dict[int, Callable[[float], float]] = field(default_factory=dict)

    def decide(self, view: RunningBatch) -> IterationPlan:
        windows = np.full(view.num_running, self.plan.window, dtype=np.int64)
        coupled = np.zeros(view.num_running, dtype=bool)
        if self.is_reconfigured:
            windows, coupled = self._reconfigured(view)
        tokens = np.where(
            coupled,
            expected_tokens(view.acceptance, windows),
            decoupled_expected_tokens(view.acceptance, windows),
        )
        return IterationPlan(tokens, windows, lambda ctx: self._latency(view, windows, coupled, ctx))

    def _reconfigured(self, view: RunningBatch) -> tuple[np.ndarray, np.ndarray]:
        """(b,) windows and (b,) coupled flags, Algorithm 2 at the current batch."""
        acceptance = view.acceptance
        percent = np.rint(np.minimum(acceptance, acceptance.mean()) * 100).astype(np.int64)  # 1% grid
        keys, index = np.unique(np.stack([percent, view.drafters]), axis=1, return_inverse=True)
        plans = [self._request_plan(int(p), int(d), view.num_running) for p, d in keys.T]
        windows = np.array([plan.window for plan in plans], dtype=np.int64)[index.ravel()]
        return windows, np.array([plan.is_coupled for plan in plans], dtype=bool)[index.ravel()]

    def _request_plan(self, percent: int, drafter: int, batch: int) -> RequestPlan:
        key = (percent, drafter, batch)
        if key not in self._table:
            draft = self._drafts.setdefault(drafter, self.draft_seconds(drafter))
            self._table[key] = best_request_plan(
                percent / 100.0, batch, self.max_window, draft, self.verify_seconds
            )
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
        return coupled_plan(self.costs, view, k, acceptance)


def group_bonus_from_table(
    ref_counts: Sequence[int], acceptance: Sequence[float]
) -> Callable[[np.ndarray], np.ndarray]:
    """Piecewise-linear gain in acceptance over zero references, from (ref count, acceptance) points."""
    xs, ys = np.asarray(ref_counts, dtype=np.float64), np.asarray(acceptance, dtype=np.float64)
    return lambda refs: np.interp(refs, xs, ys) - ys[0]
