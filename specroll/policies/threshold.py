"""Speculate only when the running batch is small. Imports no torch.

TLT §5.1 (elastic speculation): draft k tokens per request while the number of running requests is
at most a threshold (TLT's default 32), decode plainly above it.
ReSpec §5.2 (the solver): the threshold comes from a profiled performance model instead: the
largest batch size at which k-token speculation at acceptance alpha is predicted to beat plain
decoding (`solve_threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import CostModel, speedup


def solve_threshold(
    model: CostModel, k: int, alpha: float, max_batch_size: int, context_length: float = 0.0
) -> int:
    """The largest b in 1..max_batch_size with predicted speedup > 1 (0 if speculation never pays).

    With an affine cost model the speedup falls as b grows, so this is the crossover point."""
    winning = [b for b in range(1, max_batch_size + 1) if speedup(model, alpha, k, b, context_length) > 1.0]
    return max(winning, default=0)


@dataclass
class BatchThreshold:
    threshold: int = 32  # speculate while batch_size <= threshold
    k: int = 4
    name: str = "threshold"

    def __post_init__(self) -> None:
        if self.threshold < 0 or self.k < 0:
            raise ValueError(f"threshold and k must be >= 0, got {self.threshold}, {self.k}")

    @classmethod
    def from_cost_model(
        cls,
        model: CostModel,
        k: int = 4,
        alpha: float = 0.6,
        max_batch_size: int = 1024,
        context_length: float = 0.0,
    ) -> "BatchThreshold":
        return cls(solve_threshold(model, k, alpha, max_batch_size, context_length), k)

    def decide(self, batch: BatchView) -> DraftDecision:
        k = min(self.k, batch.max_draft) if batch.batch_size <= self.threshold else 0
        return DraftDecision.uniform(k, batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        pass

    def new_target(self) -> None:
        pass  # its threshold comes from the cost model alone
