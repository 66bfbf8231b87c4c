"""How far the requests of a draining batch may still go: samples of their remaining lengths.

A batch that drains is done when its last request is, and which request that is depends on lengths
nobody knows yet: RL response lengths are long-tailed, so the request with the most budget left is
rarely the one that runs longest. `auto` therefore weighs a drain by sampled remaining lengths
(`policies.auto.draining_tokens`), drawn per request from the lengths of requests this engine
finished recently that outlived it (the step's own and, across steps, the problem set's), and
uniformly over its budget where too few did. `auto` also prices its exploration against the work
left (`policies.exploration`), which takes their expectation (`expected_remaining`). Imports no torch.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

import numpy as np

WINDOW = 1024  # finished lengths kept: a few RL steps' worth of requests
MIN_OUTLIVING = 8  # finished lengths past a request's own it takes to sample from them


class FinishedLengths:
    """The output lengths of the requests an engine finished most recently."""

    def __init__(self, window: int = WINDOW) -> None:
        self._lengths: deque[int] = deque(maxlen=window)
        self._sorted: np.ndarray | None = None

    def add(self, length: int) -> None:
        self._lengths.append(length)
        self._sorted = None

    def __len__(self) -> int:
        return len(self._lengths)

    def sorted(self) -> np.ndarray:
        if self._sorted is None:
            self._sorted = np.sort(np.fromiter(self._lengths, dtype=np.int64, count=len(self._lengths)))
        return self._sorted


def sample_remaining(
    output_tokens: Sequence[int],
    budgets: Sequence[int],
    finished: np.ndarray,
    num_samples: int,
    rng: random.Random,
) -> np.ndarray:
    """(num_samples, B) remaining lengths, at least 1: request i, `output_tokens[i]` long with
    `budgets[i]` tokens left, runs on as a finished request that outlived it did (`finished` sorted),
    capped by its budget; where fewer than MIN_OUTLIVING did, uniformly over 1..budgets[i]."""
    generator = np.random.default_rng(rng.getrandbits(32))
    length = np.asarray(output_tokens, dtype=np.int64)
    budget = np.maximum(np.asarray(budgets, dtype=np.int64), 1)
    first = np.searchsorted(finished, length, side="right")  # finished[first:] outlived the request
    outliving = len(finished) - first
    u = generator.random((num_samples, len(length)))
    uniform = 1.0 + np.floor(u * budget)
    if len(finished) == 0:
        return uniform
    picked = finished[np.minimum(first + np.floor(u * outliving).astype(np.int64), len(finished) - 1)]
    history = np.clip(picked - length, 1, budget).astype(np.float64)
    return np.where(outliving >= MIN_OUTLIVING, history, uniform)


def expected_remaining(
    output_tokens: Sequence[int], budgets: Sequence[int], finished: np.ndarray
) -> np.ndarray:
    """(B,) each request's expected remaining tokens, as `sample_remaining` draws them in expectation
    where enough finished requests outlived it: the mean of min(L - length, budget) over the finished
    lengths L past its own; its whole budget where fewer than MIN_OUTLIVING did (the most it may run,
    so that a horizon without history is not cut short)."""
    length = np.asarray(output_tokens, dtype=np.int64)
    budget = np.maximum(np.asarray(budgets, dtype=np.int64), 1)
    ordered = np.asarray(finished, dtype=np.int64)
    first = np.searchsorted(ordered, length, side="right")  # ordered[first:] outlived the request
    last = np.searchsorted(ordered, length + budget, side="right")  # ordered[last:] outrun its budget
    prefix = np.concatenate([[0], np.cumsum(ordered)])
    within = prefix[last] - prefix[first] - (last - first) * length  # sum of L - length up to the budget
    outliving = len(ordered) - first
    mean = (within + (len(ordered) - last) * budget) / np.maximum(outliving, 1)
    return np.where(outliving >= MIN_OUTLIVING, mean, budget).astype(np.float64)
