"""BEG-MAB: TLT's bucketed epsilon-greedy bandit over draft lengths (TLT §5.2, Algorithm 1).

Imports no torch.

An arm is a draft length k (TLT's strategy tuple reduced to what this engine varies; k = 0 is
plain decoding). Batch sizes fall into buckets [t_i, t_{i+1}); each bucket offers its own arms,
larger batches fewer and shorter drafts (verification costs more there). A forward's reward is

    a_bar * batch_size / step_seconds,  a_bar = accepted / batch_size + 1        (lines 8-9)

i.e. tokens emitted per second. Each (bucket, arm) keeps its last `window` rewards; selection is
uniform among the bucket's arms with probability epsilon, otherwise the arm with the highest median
reward (lines 15-19). An arm not yet tried in its bucket is tried first (the paper leaves the cold
start open). The random draws come from a seeded generator, so runs repeat.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from dataclasses import dataclass, field

from specroll.policies.base import BatchView, DraftDecision, ForwardStats


@dataclass(frozen=True)
class Bucket:
    min_batch_size: int  # t_i: the bucket holds batch sizes from here up to the next bucket's t
    arms: tuple[int, ...]  # draft lengths

    def __post_init__(self) -> None:
        if self.min_batch_size < 1 or not self.arms or min(self.arms) < 0:
            raise ValueError(f"invalid bucket {self}")


DEFAULT_BUCKETS = (Bucket(1, (0, 2, 4, 8)), Bucket(16, (0, 1, 2, 4)), Bucket(64, (0, 1, 2)))


@dataclass
class BanditPolicy:
    buckets: tuple[Bucket, ...] = DEFAULT_BUCKETS
    epsilon: float = 0.1
    window: int = 16
    seed: int = 0
    name: str = "bandit"
    _rewards: dict[tuple[int, int], deque] = field(default_factory=dict)
    _chosen: tuple[int, int] | None = None
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        starts = [b.min_batch_size for b in self.buckets]
        if not starts or starts[0] != 1 or starts != sorted(set(starts)):
            raise ValueError(f"bucket thresholds must be increasing and start at 1, got {starts}")
        if not 0.0 <= self.epsilon <= 1.0 or self.window < 1:
            raise ValueError(f"epsilon must be in [0, 1] and window >= 1, got {self.epsilon}, {self.window}")
        self._rng = random.Random(self.seed)

    def bucket_index(self, batch_size: int) -> int:
        return max(i for i, b in enumerate(self.buckets) if b.min_batch_size <= batch_size)

    def select(self, batch_size: int) -> int:
        """The arm (draft length) for a batch of this size; remembers it for `observe`."""
        index = self.bucket_index(batch_size)
        arms = self.buckets[index].arms
        untried = [k for k in arms if not self._rewards.get((index, k))]
        if len(arms) == 1:
            arm = arms[0]
        elif untried:
            arm = untried[0]
        elif self._rng.random() < self.epsilon:
            arm = self._rng.choice(arms)
        else:
            arm = max(arms, key=lambda k: self.median_reward(index, k))
        self._chosen = (index, arm)
        return arm

    def median_reward(self, bucket: int, arm: int) -> float:
        rewards = self._rewards.get((bucket, arm))
        return statistics.median(rewards) if rewards else float("-inf")

    def record(self, reward: float) -> None:
        if self._chosen is not None:
            self._rewards.setdefault(self._chosen, deque(maxlen=self.window)).append(reward)

    def decide(self, batch: BatchView) -> DraftDecision:
        return DraftDecision.uniform(min(self.select(batch.batch_size), batch.max_draft), batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        seconds = stats.steady_seconds
        if seconds > 0 and stats.batch_size > 0:
            mean_accepted = stats.num_accepted / stats.batch_size + 1
            self.record(mean_accepted * stats.batch_size / seconds)

    def new_target(self) -> None:
        pass  # each arm keeps its last `window` rewards, and epsilon-greedy draws re-try every arm
