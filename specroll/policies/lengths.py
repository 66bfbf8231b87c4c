"""Runtime prediction of a request's remaining length (DAS §4.2.3). Imports no torch.

Finished requests' output lengths are split at their terciles into Short, Medium and Long classes.
A running request that has produced l tokens belongs to class c with probability
P(c | l) proportional to the number of finished requests of class c that were longer than l (the
paper's runtime update, estimated from history); it is assigned the most likely class and predicted
to emit mean(L - l) more tokens over that class's finished lengths L > l. Before `min_history`
requests have finished, or when none finished longer than l, the prediction is the request's cap
`num_remaining` (the longest it may run). Predictions never exceed that cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Sequence

CLASSES = ("short", "medium", "long")


@dataclass(frozen=True)
class LengthPrediction:
    length_class: str  # "short", "medium", "long", or "unknown" without history
    num_remaining: float


@dataclass(frozen=True)
class LengthPredictor:
    min_history: int = 8

    def __post_init__(self) -> None:
        if self.min_history < 1:
            raise ValueError(f"min_history must be >= 1, got {self.min_history}")

    def predict(
        self, finished_lengths: Sequence[int], num_output_tokens: int, num_remaining: int
    ) -> LengthPrediction:
        longer = [L for L in finished_lengths if L > num_output_tokens]
        if len(finished_lengths) < self.min_history or not longer:
            return LengthPrediction("unknown", float(num_remaining))
        bounds = _tercile_bounds(finished_lengths)
        by_class = {c: [L for L in longer if _class_of(L, bounds) == c] for c in CLASSES}
        likely = max(CLASSES, key=lambda c: (len(by_class[c]), CLASSES.index(c)))
        remaining = mean(L - num_output_tokens for L in by_class[likely])
        return LengthPrediction(likely, min(float(num_remaining), remaining))


def _tercile_bounds(lengths: Sequence[int]) -> tuple[int, int]:
    ordered = sorted(lengths)
    return ordered[len(ordered) // 3], ordered[(2 * len(ordered)) // 3]


def _class_of(length: int, bounds: tuple[int, int]) -> str:
    if length < bounds[0]:
        return "short"
    return "medium" if length < bounds[1] else "long"
