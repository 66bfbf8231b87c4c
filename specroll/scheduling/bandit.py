"""TLT's adaptive speculation (§5.1-5.2): an elastic threshold and the BEG bandit (Algorithm 1).

Speculation turns on only once a worker's running requests fall to the threshold (default 32).
Strategies are bucketed by tokens-to-verify: buckets of larger batch sizes get strategies that verify
fewer tokens. Within a bucket, epsilon-greedy picks by the median of a sliding window of rewards,
reward = accepted tokens per second of the step (Algorithm 1, lines 8-9).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpecStrategy:
    draft_depth: int
    tokens_to_verify: int


class BucketedEpsilonGreedy:
    """Algorithm 1 of TLT: strategy choice by batch-size bucket, epsilon-greedy on median reward."""

    def __init__(
        self,
        strategies: list[SpecStrategy],
        batch_thresholds: list[int],  # t_1 < t_2 < ...: bucket i is [t_i, t_{i+1} - 1]
        epsilon: float,
        window: int,
        rng: np.random.Generator,
    ) -> None:
        groups = sorted({s.tokens_to_verify for s in strategies}, reverse=True)
        if len(groups) != len(batch_thresholds):
            raise ValueError("need one batch threshold per distinct tokens_to_verify")
        self._thresholds = list(batch_thresholds)
        self._groups = [[s for s in strategies if s.tokens_to_verify == v] for v in groups]
        self._rewards = {s: deque(maxlen=window) for s in strategies}
        self._epsilon = epsilon
        self._rng = rng

    def select(self, batch_size: int) -> SpecStrategy:
        candidates = self._groups[self._bucket(batch_size)]
        if len(candidates) == 1:
            return candidates[0]
        if self._rng.random() < self._epsilon:
            return candidates[int(self._rng.integers(len(candidates)))]
        return max(candidates, key=self._median_reward)

    def record(self, strategy: SpecStrategy, elapsed_seconds: float, accepted: float, batch_size: int) -> None:
        mean_accept = accepted / batch_size + 1.0  # line 8: drafts accepted per request, plus bonus
        self._rewards[strategy].append(mean_accept * batch_size / elapsed_seconds)

    def _bucket(self, batch_size: int) -> int:
        index = int(np.searchsorted(self._thresholds, batch_size, side="right")) - 1
        return max(index, 0)

    def _median_reward(self, strategy: SpecStrategy) -> float:
        rewards = self._rewards[strategy]
        return float(np.median(rewards)) if rewards else np.inf  # untried strategies first


@dataclass(frozen=True)
class ElasticThreshold:
    max_running: int = 32  # TLT default: speculate only when this few requests remain

    def is_active(self, num_running: int) -> bool:
        return num_running <= self.max_running
