"""Seer's adaptive draft range (§4.4): the draft length follows the current concurrency.

Seer pre-computes a speculation token threshold per request and one for the whole batch; each
instance then drafts min(per-request threshold, batch threshold / concurrency) tokens per request.
Large batches (compute-bound verification) thus draft little or nothing, the long tail drafts long.

The thresholds differ by architecture, "based on their computational characteristics" (dense or
MoE; the paper does not give them): `from_cost` derives them from a worker's forward cost as a table
of draft lengths by concurrency (powers of two), beside the two thresholds. An MoE's verification of
k + 1 tokens reads more experts than a decode at small batches, so its table drafts nothing at the
batch of one where a dense model's drafts the most: the min(...) form cannot say that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specroll.policies.speculation_math import expected_tokens


@dataclass(frozen=True)
class AdaptiveDraftRange:
    max_draft_per_request: int  # per-request speculation token threshold
    max_draft_per_batch: int  # batch-level threshold: drafted tokens summed over the batch
    by_concurrency: tuple[int, ...] = ()  # draft length at 1, 2, 4, ... running requests (from_cost)

    def __post_init__(self) -> None:
        if self.max_draft_per_request < 0 or self.max_draft_per_batch < 0:
            raise ValueError("draft thresholds must be non-negative")

    def draft_len(self, num_running: int) -> int:
        if num_running < 1:
            return self.max_draft_per_request
        cap = min(self.max_draft_per_request, self.max_draft_per_batch // num_running)
        if not self.by_concurrency:
            return cap
        row = min(num_running.bit_length() - 1, len(self.by_concurrency) - 1)  # the power of two below
        return min(cap, self.by_concurrency[row])

    @classmethod
    def from_cost(
        cls,
        forward_seconds: Callable[[int, int], float],  # (batch, draft length k) -> seconds of one round
        alpha: float,  # per-token acceptance the thresholds are computed for
        max_draft: int,  # the longest draft the drafter proposes (Seer Table 2: 8)
        max_batch: int,  # the largest batch a worker runs
    ) -> "AdaptiveDraftRange":
        """The draft length k*(b) that maximises E(alpha, k) / forward_seconds(b, k) at b = 1, 2,
        4, ... up to `max_batch`; the per-request threshold is `max_draft`, the batch threshold the
        most tokens drafted over a batch, max b * k*(b)."""
        batches = [2**i for i in range(max(max_batch, 1).bit_length())]
        table = tuple(best_draft_len(forward_seconds, alpha, max_draft, b) for b in batches)
        per_batch = max(b * k for b, k in zip(batches, table))
        return cls(max_draft, per_batch, table)


def best_draft_len(
    forward_seconds: Callable[[int, int], float], alpha: float, max_draft: int, batch: int
) -> int:
    """argmax_k E(alpha, k) / forward_seconds(batch, k) over k = 0..max_draft (ties: the shorter)."""
    rates = [expected_tokens(alpha, k) / forward_seconds(batch, k) for k in range(max_draft + 1)]
    return max(range(max_draft + 1), key=lambda k: (rates[k], -k))
