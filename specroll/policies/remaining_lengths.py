"""How far the requests of a draining batch may still go: samples of their remaining lengths.

A batch that drains is done when its last request is, and which request that is depends on lengths
nobody knows yet: RL response lengths are long-tailed, so the request with the most budget left is
rarely the one that runs longest. `auto` therefore weighs a drain by sampled remaining lengths
(`policies.auto.draining_tokens`), drawn per request from the lengths of its own prompt's
requests that outlived it (`prompt_lengths`: its group's earlier in this step, and the prompt's in
earlier steps) where MIN_PROMPT_OUTLIVING did, else from the lengths of requests this engine
finished recently that outlived it (the step's own and, across steps, the problem set's), and
uniformly over its budget where too few did. `auto` also prices its exploration against the work
left (`policies.exploration`), which takes their expectation (`expected_remaining`). Imports no torch.

A prompt's own lengths take fewer samples than the pool: they are draws from the very distribution
the request's length is drawn from (siblings run alike: Seer §3.2, Fig. 4; DAS §4.2.3 keys its
history by problem), so four of them already place its tail near where it lies, while the pool's
eight guard against a tail drawn from a handful of unrelated prompts, whose typical lengths differ
several-fold. Four also lets a group of eight inform its own requests within the first step.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence

import numpy as np

WINDOW = 1024  # finished lengths kept: a few RL steps' worth of requests
MIN_OUTLIVING = 8  # finished lengths past a request's own it takes to sample from them
MIN_PROMPT_OUTLIVING = 4  # of its own prompt's, the same


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
    prompt_lengths: Sequence[Sequence[int]] = (),
) -> np.ndarray:
    """(num_samples, B) remaining lengths, at least 1: request i, `output_tokens[i]` long with
    `budgets[i]` tokens left, runs on as a finished request of its own prompt that outlived it did
    (`prompt_lengths[i]` sorted, where MIN_PROMPT_OUTLIVING did), else as a finished request that
    outlived it did (`finished` sorted, where MIN_OUTLIVING did), capped by its budget; else
    uniformly over 1..budgets[i]. Without `prompt_lengths`, no request has a prompt's lengths."""
    generator = np.random.default_rng(rng.getrandbits(32))
    length = np.asarray(output_tokens, dtype=np.int64)
    budget = np.maximum(np.asarray(budgets, dtype=np.int64), 1)
    first = np.searchsorted(finished, length, side="right")  # finished[first:] outlived the request
    outliving = len(finished) - first
    u = generator.random((num_samples, len(length)))
    samples = 1.0 + np.floor(u * budget)
    if len(finished) > 0:
        picked = finished[np.minimum(first + np.floor(u * outliving).astype(np.int64), len(finished) - 1)]
        history = np.clip(picked - length, 1, budget).astype(np.float64)
        samples = np.where(outliving >= MIN_OUTLIVING, history, samples)
    for i, lengths in enumerate(prompt_lengths):
        _sample_own_prompt(samples[:, i], u[:, i], lengths, int(length[i]), int(budget[i]))
    return samples


def _sample_own_prompt(
    samples: np.ndarray, u: np.ndarray, lengths: Sequence[int], length: int, budget: int
) -> None:
    """Overwrite one request's samples (num_samples,) with draws from its prompt's sorted `lengths`
    past its own `length`, where MIN_PROMPT_OUTLIVING of them outlived it; `u` are its uniforms."""
    first = bisect_right(lengths, length)
    outliving = len(lengths) - first
    if outliving < MIN_PROMPT_OUTLIVING:
        return
    own = np.asarray(lengths[first:], dtype=np.int64)
    samples[:] = np.clip(own[np.floor(u * outliving).astype(np.int64)] - length, 1, budget)


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
