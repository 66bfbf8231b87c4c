"""The engine's speculation policies driving simulated workers. Imports no torch.

Each worker runs its own instance of an engine policy (`specroll.policies`: auto, das, bandit,
threshold, fixed-K, ...), as each engine does, through the engine's step contract: the policy sees a
`BatchView` of the running batch and returns a `DraftDecision`, then is told what happened
(`ForwardStats`).

The simulator is a fluid model: a worker's batch is fixed over a segment of many iterations, each
advancing every copy by its expected tokens E(alpha, k). The policy sees one segment as one forward:
- the decision's draft lengths, clipped as the engine clips them (to max_draft and to
  num_remaining - 1), hold for the whole segment;
- each request's lifetime counters (num_drafted, num_accepted, num_forwards) advance by one forward
  per segment, whose accepted counts are drawn (seeded) from the copy's acceptance: the number of
  Bernoulli(alpha) successes before the first failure, at most k. Drawn, not expected: the engine's
  estimators (`AcceptanceTracker`, `RecentAcceptance`) count a trial per accepted token plus one for
  the first rejection, so a fractional expected count E - 1 would read as (E - 1) / E, below alpha;
- `ForwardStats` carries the same drawn counts and the modelled seconds of one iteration, drafting
  included (so `draft_seconds` is 0);
- the `BatchView` is the engine's own (`policies.batch_view_builder`, the builder the engine calls),
  from what the worker knows as its engine would: its queue (`num_waiting`), the lengths of the
  requests it finished (`finished_lengths`) and per prompt its requests' lengths (`prompt_lengths`:
  a simulated rollout is one step, so a prompt's history is its group's samples that finished
  earlier on that worker), each request's cached context counted as the engine counts it;
- a forward emits, per copy, its accepted tokens and one more, none past max_tokens (`Request.commit`).
A decision's `drafter` is not followed: a simulated copy's drafter is fixed when it is dispatched.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from specroll.policies.base import BatchView, DraftDecision, ForwardStats, SpeculationPolicy
from specroll.policies.batch_view_builder import RunningCounts, build_batch_view, num_cached_before_forward
from specroll.sim.speculation import IterationPlan, RunningBatch, SpecCosts, coupled_plan

_MAX_ALPHA = 1.0 - 1e-9  # a geometric draw needs a failure probability above 0


class EnginePolicySpeculation:
    def __init__(
        self, costs: SpecCosts, make_policy: Callable[[], SpeculationPolicy], max_draft: int, seed: int = 0
    ):
        self.costs = costs
        self.make_policy = make_policy
        self.max_draft = max_draft
        self.policies: dict[int, SpeculationPolicy] = {}  # worker -> its policy
        self._rng = np.random.default_rng(seed)
        self._counters = np.zeros((3, 0), dtype=np.int64)  # drafted, accepted, forwards per request id
        self._decided: dict[int, DraftDecision] = {}  # worker -> the decision of its current segment

    def policy(self, worker: int) -> SpeculationPolicy:
        if worker not in self.policies:
            self.policies[worker] = self.make_policy()
        return self.policies[worker]

    def decide(self, view: RunningBatch) -> IterationPlan:
        batch = self.batch_view(view)
        decision = self.policy(view.worker).decide(batch)
        self._decided[view.worker] = decision
        return coupled_plan(self.costs, view, _clipped(decision, batch), view.acceptance)

    def observe(self, view: RunningBatch, plan: IterationPlan, iteration_seconds: float) -> None:
        decision = self._decided.pop(view.worker)
        accepted = self._draw_accepted(view.acceptance, plan.draft_len)
        self._counters[:, view.request_ids] += np.stack([plan.draft_len, accepted, np.ones_like(accepted)])
        stats = ForwardStats(
            batch_size=view.num_running,
            num_drafted=int(plan.draft_len.sum()),
            num_accepted=int(accepted.sum()),
            num_emitted=int(_emitted(accepted, view).sum()),
            forward_seconds=iteration_seconds,
            draft_seconds=0.0,
            request_ids=tuple(view.request_ids.tolist()),
            drafted=tuple(plan.draft_len.tolist()),
            accepted=tuple(accepted.tolist()),
            drafter=decision.drafter,
        )
        self.policy(view.worker).observe(stats)

    def batch_view(self, view: RunningBatch) -> BatchView:
        """The engine's view of the running batch, by the engine's builder (`build_batch_view`): output
        tokens are the fluid positions, floored; a copy's drafter drafts no trees."""
        self._grow(int(view.request_ids.max()) + 1)
        outputs = view.positions.astype(np.int64).tolist()
        cached = [num_cached_before_forward(view.prompt_tokens, n) for n in outputs]
        columns = (
            view.request_ids.tolist(),
            view.group_ids.tolist(),
            outputs,
            [view.max_tokens - n for n in outputs],
            *self._counters[:, view.request_ids].tolist(),
            cached,
            view.group_ids.tolist(),  # a prompt's key: its group (a simulated rollout is one step)
        )
        return build_batch_view(
            [RunningCounts(*row) for row in zip(*columns)],
            self.max_draft,
            trees=False,
            num_waiting=view.num_waiting,
            finished_lengths=view.finished_lengths,
            prompt_lengths=view.prompt_lengths,
        )

    def _grow(self, num_requests: int) -> None:
        if num_requests > self._counters.shape[1]:
            grown = np.zeros((3, max(num_requests, 2 * self._counters.shape[1])), dtype=np.int64)
            grown[:, : self._counters.shape[1]] = self._counters
            self._counters = grown

    def _draw_accepted(self, acceptance: np.ndarray, draft_len: np.ndarray) -> np.ndarray:
        """Accepted tokens of one forward per copy: successes before the first rejection, at most k."""
        failure = 1.0 - np.minimum(acceptance, _MAX_ALPHA)
        successes = self._rng.geometric(failure) - 1
        return np.minimum(successes, draft_len).astype(np.int64)


def _clipped(decision: DraftDecision, batch: BatchView) -> np.ndarray:
    """The engine's budgets: a request that may emit only one more token gains nothing from drafting."""
    return np.asarray(batch.clip(decision.draft_lengths), dtype=np.int64)


def _emitted(accepted: np.ndarray, view: RunningBatch) -> np.ndarray:
    """(b,) tokens each copy keeps of one forward: its accepted drafts and one more, none past
    max_tokens, as `Request.commit` keeps them (outputs are the fluid positions, floored)."""
    remaining = view.max_tokens - view.positions.astype(np.int64)
    return np.minimum(accepted + 1, np.maximum(remaining, 0))
