"""A bounded buffer of feature sequences for online head training: the newest `max_positions`
positions, oldest steps dropped first, each sequence with its loss weight. Safe to share between the
rollout's thread (which adds) and a spot trainer's (which samples)."""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass

from specroll.head.features import FeatureSequence
from specroll.head.training import HeadTrainConfig, make_batch, windows, Batch


@dataclass(frozen=True)
class Entry:
    step: int
    sequence: FeatureSequence
    weight: float = 1.0


class FeatureBuffer:
    def __init__(self, max_positions: int = 200_000) -> None:
        if max_positions <= 0:
            raise ValueError(f"max_positions must be positive, got {max_positions}")
        self.max_positions = max_positions
        self._entries: deque[Entry] = deque()
        self._num_positions = 0
        self._lock = threading.Lock()

    def add(self, step: int, sequences: list[FeatureSequence], weights: list[float] | None = None) -> None:
        weights = weights or [1.0] * len(sequences)
        with self._lock:
            for sequence, weight in zip(sequences, weights):
                self._entries.append(Entry(step, sequence, weight))
                self._num_positions += sequence.num_positions
            while self._num_positions > self.max_positions and len(self._entries) > 1:
                self._num_positions -= self._entries.popleft().sequence.num_positions

    @property
    def num_positions(self) -> int:
        return self._num_positions

    def __len__(self) -> int:
        return len(self._entries)

    def sample(self, config: HeadTrainConfig, rng: random.Random) -> Batch | None:
        """A batch of `windows_per_batch` windows drawn uniformly over the buffer's windows."""
        with self._lock:
            entries = list(self._entries)
        if not entries:
            return None
        sequences = [e.sequence for e in entries]
        spans = windows(sequences, config.window, config.depth)
        chosen = [spans[rng.randrange(len(spans))] for _ in range(config.windows_per_batch)]
        return make_batch(sequences, chosen, config.window, [e.weight for e in entries])
