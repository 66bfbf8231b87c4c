"""The draft ladder: choosing among drafters by expected speedup (SpecActor §4.2). Imports no torch.

A rung is one drafter with its acceptance probability alpha (profiled offline, or live for the
drafter now running) and its drafting cost D(b) per draft token (SpecActor §4.1, affine in the
batch size; 0 for prompt lookup). Its speedup at batch size b is the best over k of

    E(alpha, k) * t(b, 1) / (k D(b) + t(b, k + 1))

with t the target's forward time from the cost model. The ladder picks the rung with the highest
speedup at the batch's acceptance (SpecActor picks one drafter for the batch by its mean acceptance,
which is stable over a large batch).

Contract with the engine: the engine runs one drafter per rollout today. `LadderPolicy.draft_lengths`
answers for the drafter that is running (`active`), drafting its best k or 0 when no speculation
pays; `drafter_choice(batch)` names the rung the ladder would run instead, or None when no drafter
beats plain decoding. An engine that can switch drafters calls it, switches, and sets `active`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specroll.policies.acceptance import AcceptanceTracker
from specroll.policies.base import BatchView, StepStats
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

    def rung(self, name: str) -> Rung:
        for rung in self.rungs:
            if rung.name == name:
                return rung
        raise ValueError(f"no rung named {name!r}; the ladder has {', '.join(r.name for r in self.rungs)}")

    def evaluate(self, rung: Rung, alpha: float, batch_size: int, max_draft: int,
                 context_length: float = 0.0) -> Choice:
        model = self.cost_model.with_draft(rung.draft)
        k = best_draft_length(model, alpha, batch_size, max_draft, context_length)
        return Choice(rung, k, speedup(model, alpha, k, batch_size, context_length))

    def choose(self, batch_size: int, max_draft: int, alphas: dict[str, float] | None = None,
               context_length: float = 0.0) -> Choice:
        """The fastest rung; `alphas` overrides profiled acceptance by rung name."""
        alphas = alphas or {}
        choices = [self.evaluate(r, alphas.get(r.name, r.alpha), batch_size, max_draft, context_length)
                   for r in self.rungs]
        return max(choices, key=lambda c: c.speedup)


@dataclass
class LadderPolicy:
    ladder: DraftLadder
    active: str = ""  # the drafter the engine runs; "" = the first rung
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "ladder"

    def __post_init__(self) -> None:
        self.active = self.active or self.ladder.rungs[0].name
        self.tracker.prior_alpha = self.ladder.rung(self.active).alpha

    def _alphas(self, batch: BatchView) -> dict[str, float]:
        return {self.active: self.tracker.batch_alpha(batch)}

    def _context(self, batch: BatchView) -> float:
        contexts = [v.num_context_tokens or v.num_output_tokens for v in batch.requests]
        return sum(contexts) / len(contexts) if contexts else 0.0

    def draft_lengths(self, batch: BatchView) -> list[int]:
        self.tracker.update(batch)
        choice = self.ladder.evaluate(self.ladder.rung(self.active), self.tracker.batch_alpha(batch),
                                      batch.batch_size, batch.max_draft, self._context(batch))
        return [choice.k] * batch.batch_size

    def drafter_choice(self, batch: BatchView) -> str | None:
        """The drafter the ladder would run for this batch; None when plain decoding is fastest."""
        choice = self.ladder.choose(batch.batch_size, batch.max_draft, self._alphas(batch), self._context(batch))
        return choice.rung.name if choice.k > 0 and choice.speedup > 1.0 else None

    def observe(self, stats: StepStats) -> None:
        pass
