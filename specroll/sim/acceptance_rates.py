"""Each drafter's acceptance rate alpha (the chance a draft token is accepted), varying by request and
along the response.

Each drafter has a mean per-token acceptance probability; a request's own rate is Beta-distributed
around it (SpecActor Fig. 7: the best drafter differs from request to request), may drift
linearly along the response, and may depend on the request's length (`length_slope`: SpecActor §5.5
ascribes vanilla speculation's small gain to "a suboptimal draft method for the tailed requests",
i.e. long requests that draft worse; no paper states the slope, so every preset leaves it at 0).
`fit` recovers mean and concentration from replayed drafting traces (accepted and proposed counts
per request) by the method of moments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DrafterProfile:
    name: str
    mean_acceptance: float  # per-token acceptance probability, averaged over requests
    concentration: float  # Beta(a, b) with a + b = concentration: larger = less spread
    drift: float = 0.0  # change of the rate from the first token to max_tokens
    draft_model: str | None = None  # a cost_model.MODELS key; None for model-free drafters
    cpu_draft_seconds: float = 0.0  # per draft (one lookup) for model-free drafters
    length_slope: float = 0.0  # change of the rate per unit of (output length / max_tokens), mean kept

    def __post_init__(self) -> None:
        if not 0 < self.mean_acceptance < 1:
            raise ValueError("mean acceptance must lie in (0, 1)")
        if self.concentration <= 0:
            raise ValueError("concentration must be positive")

    def sample(self, num_requests: int, rng: np.random.Generator) -> np.ndarray:
        a = self.mean_acceptance * self.concentration
        return rng.beta(a, self.concentration - a, size=num_requests)

    @classmethod
    def fit(cls, name: str, accepted: np.ndarray, proposed: np.ndarray, **costs) -> "DrafterProfile":
        """Method of moments on per-request rates accepted/proposed; needs two or more requests."""
        rates = np.asarray(accepted, dtype=np.float64) / np.maximum(proposed, 1)
        mean, var = float(rates.mean()), float(rates.var(ddof=1))
        concentration = mean * (1 - mean) / var - 1.0 if var > 0 else 1e3
        return cls(name, mean, max(concentration, 1e-3), **costs)


@dataclass(frozen=True)
class AcceptanceModel:
    drafters: tuple[DrafterProfile, ...]  # drafter ladder, best expected speed-up first

    def __post_init__(self) -> None:
        if not self.drafters:
            raise ValueError("need at least one drafter")

    def sample(
        self, num_requests: int, rng: np.random.Generator, length_share: np.ndarray | None = None
    ) -> np.ndarray:
        """(num_drafters, num_requests) base acceptance probability per drafter and request;
        `length_share` (num_requests,): each request's output length over the budget, which moves
        a drafter's rates by its `length_slope` about the mean share (the mean rate is kept)."""
        base = np.stack([d.sample(num_requests, rng) for d in self.drafters])
        slopes = np.array([d.length_slope for d in self.drafters])
        if length_share is None or not slopes.any():
            return base
        centred = np.asarray(length_share, dtype=np.float64) - float(np.mean(length_share))
        return np.clip(base + slopes[:, None] * centred[None, :], 0.01, 0.99)

    def at_position(
        self, drafter: int, base: np.ndarray, position: np.ndarray, max_tokens: int
    ) -> np.ndarray:
        drift = self.drafters[drafter].drift
        return np.clip(base + drift * position / max_tokens, 0.0, 0.99)
