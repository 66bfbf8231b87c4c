"""How much of what a policy asks for its drafter proposes. Imports no torch.

A policy asks each request for k draft tokens; a model-free drafter proposes only where it finds a
match (SmolLM2's suffix drafters at T = 1: for about half of the requests of a batch-8 forward), and
a draft head only for requests whose state is current. A request left without a draft still pays
for the forward's width (every row is verified as wide as the widest draft) and emits one token.
Acceptance (`acceptance_estimates`) is measured on the tokens that were drafted, so a policy that
expects E(alpha, k) tokens of every request it asks overestimates a forward by the share of requests
that got no draft, and drafts at a loss where that share is large (measured: `auto` drafting 45 % of
SmolLM2's batch-8 forwards at 0.80x plain, where asking nothing ran at 1.00x).

`DraftCoverage` keeps the share of asked tokens that were proposed, over recent chain forwards (each
token weighs 2^(-age / half_life), age in asked tokens), shrunk toward `prior_share` (a drafter that
always fills its budget, as a draft model does) as `prior_strength` pseudo-tokens, the Beta prior the
acceptance estimates use (`acceptance_estimates.shrunk`). A request asked
for k then emits 1 + share * (E(alpha, k) - 1) in expectation: the proposal is made or not, and when
made it is accepted as alpha says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specroll.policies.acceptance_estimates import shrunk


@dataclass
class DraftCoverage:
    prior_share: float = 1.0
    prior_strength: float = 8.0  # pseudo-tokens of the prior
    half_life: float = 256.0  # asked tokens after which a measurement weighs half
    asked: float = 0.0
    proposed: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior_share <= 1.0 or self.prior_strength < 0 or self.half_life <= 0:
            raise ValueError(
                f"need 0 <= prior_share <= 1, prior_strength >= 0 and half_life > 0, got "
                f"{self.prior_share}, {self.prior_strength}, {self.half_life}"
            )

    def record(self, asked: Sequence[int], proposed: Sequence[int]) -> None:
        """One chain forward: per request, draft tokens asked for and proposed (verified)."""
        num_asked = sum(asked)
        if num_asked <= 0:
            return
        keep = 0.5 ** (num_asked / self.half_life)
        self.asked = keep * self.asked + num_asked
        self.proposed = keep * self.proposed + sum(min(p, a) for a, p in zip(asked, proposed))

    @property
    def share(self) -> float:
        """The share of asked draft tokens a drafter proposes, in [0, 1]."""
        return shrunk(self.proposed, self.asked, self.prior_share, self.prior_strength)
