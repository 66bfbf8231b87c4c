"""The draft ladder: choosing among drafters by expected speedup (SpecActor §4.2). Imports no torch.

A rung is one drafter with its acceptance probability alpha (profiled offline; the prior of its live
estimate) and its drafting cost D(b) per draft token (SpecActor §4.1, affine in the
batch size; 0 for prompt lookup). Its speedup at batch size b is the best over k of

    E(alpha, k) * t(b, 1) / (k D(b) + t(b, k + 1))

with t the target's forward time from the cost model. The ladder picks the rung with the highest
speedup at the batch's acceptance (SpecActor picks one drafter for the batch by its mean acceptance,
which is stable over a large batch).

Each forward `LadderPolicy.decide` returns one decision taken before any draft: the rung to draft
with and its best k, or plain decoding when no rung is predicted to beat it. Each rung's alpha is
measured only on the forwards it drafted (`RecentAcceptance`, recent forwards weighing most, shrunk
toward its profiled alpha), so a rung judged poor keeps its estimate until it drafts again. That is
why a plain forward probes, one in `probe_every` on average (seeded): it drafts `probe_length`
tokens with the rung tried least recently, so a rung that became good, or the one running before,
can be chosen again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from specroll.policies.acceptance_estimates import RecentAcceptance
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import Affine, CostModel, best_draft_length, speedup


@dataclass(frozen=True)
class Rung:
    name: str
    alpha: float  # profiled per-token acceptance
    draft: Affine = Affine(0.0, 0.0)  # D(b), seconds per draft token

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"rung {self.name}: alpha must be in [0, 1], got {self.alpha}")


@dataclass(frozen=True)
class Choice:
    rung: Rung
    k: int
    speedup: float


@dataclass(frozen=True)
class DraftLadder:
    rungs: tuple[Rung, ...]
    cost_model: CostModel

    def __post_init__(self) -> None:
        names = [r.name for r in self.rungs]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"a ladder needs rungs with distinct names, got {names}")

    def evaluate(
        self, rung: Rung, alpha: float, batch_size: int, max_draft: int, context_length: float = 0.0
    ) -> Choice:
        model = self.cost_model.with_draft(rung.draft)
        k = best_draft_length(model, alpha, batch_size, max_draft, context_length)
        return Choice(rung, k, speedup(model, alpha, k, batch_size, context_length))

    def choose(
        self,
        batch_size: int,
        max_draft: int,
        alphas: dict[str, float] | None = None,
        context_length: float = 0.0,
    ) -> Choice:
        """The fastest rung; `alphas` overrides profiled acceptance by rung name."""
        alphas = alphas or {}
        choices = [
            self.evaluate(r, alphas.get(r.name, r.alpha), batch_size, max_draft, context_length)
            for r in self.rungs
        ]
        return max(choices, key=lambda c: c.speedup)


@dataclass
class LadderPolicy:
    ladder: DraftLadder
    probe_every: int = 8
    probe_length: int = 2
    half_life: float = 4.0  # forwards a rung drafted, for its live alpha
    seed: int = 0
    name: str = "ladder"
    _estimates: dict[str, RecentAcceptance] = field(init=False, repr=False)
    _last_drafted: dict[str, int] = field(
        init=False, repr=False
    )  # rung -> the decision that last drafted with it
    _num_decisions: int = field(default=0, init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.probe_every < 1 or self.probe_length < 1:
            raise ValueError(
                f"probe_every and probe_length must be >= 1, got {self.probe_every}, {self.probe_length}"
            )
        self._estimates = {
            r.name: RecentAcceptance(r.alpha, half_life=self.half_life) for r in self.ladder.rungs
        }
        self._last_drafted = {r.name: -1 for r in self.ladder.rungs}
        self._rng = random.Random(self.seed)

    def alpha(self, rung: str) -> float:
        """The live estimate of a rung's per-token acceptance."""
        return self._estimates[rung].alpha

    def decide(self, batch: BatchView) -> DraftDecision:
        self._num_decisions += 1
        alphas = {name: estimate.alpha for name, estimate in self._estimates.items()}
        choice = self.ladder.choose(batch.batch_size, batch.max_draft, alphas, _mean_context(batch))
        if choice.k > 0 and choice.speedup > 1.0:
            return self._draft_with(choice.rung.name, choice.k, batch)
        if self._rng.random() * self.probe_every < 1.0:
            return self._draft_with(self._least_recent(), min(self.probe_length, batch.max_draft), batch)
        return DraftDecision.uniform(0, batch.batch_size)

    def _draft_with(self, rung: str, k: int, batch: BatchView) -> DraftDecision:
        self._last_drafted[rung] = self._num_decisions
        return DraftDecision.uniform(k, batch.batch_size, rung)

    def _least_recent(self) -> str:
        return min(self.ladder.rungs, key=lambda r: self._last_drafted[r.name]).name

    def observe(self, stats: ForwardStats) -> None:
        if stats.drafter in self._estimates and stats.num_drafted > 0:
            self._estimates[stats.drafter].record(stats.drafted, stats.accepted)

    def new_target(self) -> None:
        pass  # each rung's acceptance decays with a half-life, and the least recent rung is probed


def _mean_context(batch: BatchView) -> float:
    contexts = [v.num_context_tokens or v.num_output_tokens for v in batch.requests]
    return sum(contexts) / len(contexts) if contexts else 0.0
