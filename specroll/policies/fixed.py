"""The two simplest policies: never speculate, or always draft k tokens."""

from __future__ import annotations

from dataclasses import dataclass

from specroll.policies.base import BatchView, DraftDecision, ForwardStats


@dataclass
class NoSpeculation:
    name: str = "none"

    def decide(self, batch: BatchView) -> DraftDecision:
        return DraftDecision.uniform(0, batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        pass

    def new_target(self) -> None:
        pass  # nothing measured


@dataclass
class FixedDraftLength:
    k: int = 4

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError(f"draft length must be >= 0, got {self.k}")

    @property
    def name(self) -> str:
        return f"fixed-{self.k}"

    def decide(self, batch: BatchView) -> DraftDecision:
        return DraftDecision.uniform(min(self.k, batch.max_draft), batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        pass

    def new_target(self) -> None:
        pass  # nothing measured
