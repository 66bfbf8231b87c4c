"""Live correction of the cost model by measured forward times. Imports no torch.

A profile times bare forwards; a verification forward in the engine also runs the sampling and
verification math, the drafter's own bookkeeping and the scheduler, and the machine drifts. A policy
that trusts the profile alone can keep speculating where it loses.

So every forward that ran as a policy decided is folded in as measured / predicted seconds, per
(batch-size bucket, draft cap, tree or chain); a policy multiplies its predictions by
`scale(batch_size, cap, tree)`,
the median of the last `window` ratios once `min_samples` are in (a median, because a shared
machine has spikes of 5x and more that a mean would follow). Buckets are powers of two (as TLT
buckets its bandit by batch size), because the error depends on the batch: small batches are
dominated by per-forward costs the profile does not see. A (bucket, cap) not yet measured borrows
from the same bucket: the same kind (plain, chains or trees) first, then the nearest kind, so that
both sides of a comparison are corrected alike until each is measured, and a tree's costs (its
drafting, its wider verification) never price a chain while chains of the bucket are measured; with
nothing in the bucket the profile's own word stands (1).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


def batch_bucket(batch_size: int) -> int:
    """0 for 1, 1 for 2-3, 2 for 4-7, ...: the bit length of batch_size minus one."""
    return max(1, batch_size).bit_length() - 1


@dataclass
class ForwardTimeCalibration:
    window: int = 16
    min_samples: int = 3
    _ratios: dict[tuple[int, int, bool], deque] = field(default_factory=dict)  # (bucket, cap, tree)

    def __post_init__(self) -> None:
        if self.window < 1 or not 1 <= self.min_samples <= self.window:
            raise ValueError(
                f"need window >= 1 and 1 <= min_samples <= window, got {self.window}, {self.min_samples}"
            )

    def record(
        self, batch_size: int, cap: int, predicted_seconds: float, measured_seconds: float, tree: bool = False
    ) -> None:
        if predicted_seconds <= 0 or measured_seconds <= 0:
            return
        key = (batch_bucket(batch_size), cap, tree and cap > 0)
        self._ratios.setdefault(key, deque(maxlen=self.window)).append(measured_seconds / predicted_seconds)

    def is_measured(self, batch_size: int, is_drafting: bool) -> bool:
        """Whether forwards of this kind (drafting or plain) have been measured in this bucket."""
        return bool(self._measured(batch_bucket(batch_size), is_drafting))

    def is_measured_cap(self, batch_size: int, cap: int, tree: bool = False) -> bool:
        """Whether forwards with this draft cap (of trees or chains) have been measured in this batch
        size's bucket."""
        key = (batch_bucket(batch_size), cap, tree and cap > 0)
        return len(self._ratios.get(key, ())) >= self.min_samples

    def samples_needed(self, batch_size: int, cap: int, tree: bool = False) -> int:
        """Forwards of this cap still to measure before it stops borrowing its correction."""
        key = (batch_bucket(batch_size), cap, tree and cap > 0)
        return max(0, self.min_samples - len(self._ratios.get(key, ())))

    def scale(self, batch_size: int, cap: int, tree: bool = False) -> float:
        bucket, kind = batch_bucket(batch_size), _kind(cap, tree)
        if self.is_measured_cap(batch_size, cap, tree):
            return statistics.median(self._ratios[(bucket, cap, kind == "tree")])
        for other in _BORROWS[kind]:  # the same kind first, then the nearest
            borrowed = self._measured_kind(bucket, other)
            if borrowed:
                return statistics.fmean(borrowed)
        return 1.0

    def _measured(self, bucket: int, is_drafting: bool) -> list[float]:
        kinds = ("chain", "tree") if is_drafting else ("plain",)
        return [ratio for kind in kinds for ratio in self._measured_kind(bucket, kind)]

    def _measured_kind(self, bucket: int, kind: str) -> list[float]:
        return [
            statistics.median(r)
            for (b, c, t), r in self._ratios.items()
            if b == bucket and _kind(c, t) == kind and len(r) >= self.min_samples
        ]


def _kind(cap: int, tree: bool) -> str:
    return "plain" if cap == 0 else "tree" if tree else "chain"


# an unmeasured kind's correction: its own kind's in the bucket, else the nearest kind's (a tree's
# drafting and verification differ from a chain's more than a chain's from a plain forward's)
_BORROWS = {
    "plain": ("plain", "chain", "tree"),
    "chain": ("chain", "plain", "tree"),
    "tree": ("tree", "chain", "plain"),
}
