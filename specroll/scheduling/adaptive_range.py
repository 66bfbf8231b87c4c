"""Seer's adaptive draft range (§4.4): the draft length follows the current concurrency.

Seer pre-computes a speculation token threshold per request and one for the whole batch; each
instance then drafts min(per-request threshold, batch threshold / concurrency) tokens per request.
Large batches (compute-bound verification) thus draft little or nothing, the long tail drafts long.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdaptiveDraftRange:
    max_draft_per_request: int  # per-request speculation token threshold
    max_draft_per_batch: int  # batch-level threshold: drafted tokens summed over the batch

    def __post_init__(self) -> None:
        if self.max_draft_per_request < 0 or self.max_draft_per_batch < 0:
            raise ValueError("draft thresholds must be non-negative")

    def draft_len(self, num_running: int) -> int:
        if num_running < 1:
            return self.max_draft_per_request
        return min(self.max_draft_per_request, self.max_draft_per_batch // num_running)
