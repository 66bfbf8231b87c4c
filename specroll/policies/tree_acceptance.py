"""How many draft tokens a tree of n nodes gets accepted, measured live. Imports no torch.

A chain's acceptance is one probability a token (`AcceptanceTracker`); a tree's is not: its nodes
spread over siblings and depths as its drafter ranks them, so what a tree of n nodes yields is
measured as it is, per node budget: the mean number of draft tokens accepted a request, over the
requests that drafted a tree of that budget. Acceptance does not depend on the batch, so the
measurements pool over batch sizes.

Until a budget has been measured its estimate is a prior: the chain as deep as the tree grows
(a tree's first path is its drafter's best guess, as a chain's is), at the chains' pooled alpha;
each measurement moves it as one of `prior_strength` pseudo-requests would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from specroll.policies.speculation_math import expected_tokens


@dataclass
class _Budget:
    requests: float = 0.0  # request-forwards that drafted a tree of this budget (recency-weighted)
    accepted: float = 0.0  # their accepted draft tokens


@dataclass
class TreeAcceptance:
    prior_depth: int = 4  # how deep the prior's chain reaches (a tree drafter's depth)
    prior_strength: float = 4.0
    half_life: float = 256.0  # request-forwards: older measurements fade (the drafter trains, text moves)
    _budgets: dict[int, _Budget] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prior_depth < 1 or self.prior_strength <= 0 or self.half_life <= 0:
            raise ValueError(f"need prior_depth >= 1, prior_strength > 0 and half_life > 0, got {self}")

    def record(self, budget: int, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """One tree forward at node `budget`: per request, nodes drafted and draft tokens accepted
        (requests given no tree are left out)."""
        kept = [a for d, a in zip(drafted, accepted) if d > 0]
        if not kept:
            return
        counts = self._budgets.setdefault(budget, _Budget())
        fade = 0.5 ** (len(kept) / self.half_life)
        counts.requests = fade * counts.requests + len(kept)
        counts.accepted = fade * counts.accepted + sum(kept)

    def trials(self, budget: int) -> float:
        counts = self._budgets.get(budget)
        return counts.requests if counts else 0.0

    def expected_accepted(self, budget: int, chain_alpha: float) -> float:
        """Draft tokens a request's tree of `budget` nodes gets accepted, in expectation."""
        prior = float(expected_tokens(chain_alpha, min(budget, self.prior_depth))) - 1.0
        counts = self._budgets.get(budget, _Budget())
        return (counts.accepted + self.prior_strength * prior) / (counts.requests + self.prior_strength)

    def new_target(self) -> None:
        self._budgets = {}
