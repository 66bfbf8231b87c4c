"""Measures forward latency of a checkpoint on the machine at hand, for the cost model.

A forward of b rows, n new tokens each, after `context_length` cached positions is timed directly
on a `ModelRunner`: the cache's contents do not change the work, so nothing is prefilled.
Each point is the median of `repeats` timings after `warmup` untimed ones.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.cost_model import Affine, CostModel, LatencySample, fit, fit_affine


@dataclass(frozen=True)
class ProfileGrid:
    batch_sizes: tuple[int, ...]
    tokens_per_sequence: tuple[int, ...]  # the fed token plus the draft: 1..max_draft+1
    context_lengths: tuple[int, ...]
    repeats: int = 3
    warmup: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_sizes", "tokens_per_sequence"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be non-empty and >= 1, got {values}")
        if not self.context_lengths or min(self.context_lengths) < 0:
            raise ValueError(f"context_lengths must be non-empty and >= 0, got {self.context_lengths}")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")

    @classmethod
    def standard(cls, max_batch_size: int, max_draft: int, context_lengths: tuple[int, ...] = (64, 512),
                 repeats: int = 3) -> "ProfileGrid":
        """Powers of two up to max_batch_size; widths 1, 2, 3, 5, 9, ... up to max_draft + 1."""
        batches = _powers_of_two(max_batch_size)
        widths = sorted({1, 2, *(w + 1 for w in _powers_of_two(max_draft))})
        return cls(batches, tuple(widths), context_lengths, repeats)

    @property
    def capacity(self) -> int:
        return max(self.context_lengths) + max(self.tokens_per_sequence)


def _powers_of_two(limit: int) -> tuple[int, ...]:
    values = [1]
    while values[-1] * 2 <= limit:
        values.append(values[-1] * 2)
    if values[-1] != limit and limit > 0:
        values.append(limit)
    return tuple(values)


def time_forward(runner: ModelRunner, batch_size: int, num_tokens: int, context_length: int,
                 repeats: int, warmup: int) -> float:
    """Median seconds of one forward of `batch_size` rows x `num_tokens` after `context_length`."""
    inputs = [SequenceInput(slot, context_length, [2] * num_tokens, num_logits=num_tokens)
              for slot in range(batch_size)]
    timings = []
    for i in range(warmup + repeats):
        started = time.perf_counter()
        runner.forward(inputs)
        if runner.device.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def profile_runner(runner: ModelRunner, grid: ProfileGrid,
                   on_sample: Callable[[LatencySample], None] | None = None) -> list[LatencySample]:
    samples = []
    for context in grid.context_lengths:
        for batch in grid.batch_sizes:
            for width in grid.tokens_per_sequence:
                seconds = time_forward(runner, batch, width, context, grid.repeats, grid.warmup)
                samples.append(LatencySample(batch, width, context, seconds))
                if on_sample is not None:
                    on_sample(samples[-1])
    return samples


def profile_draft_runner(runner: ModelRunner, grid: ProfileGrid) -> tuple[Affine, list[LatencySample]]:
    """D(b): one-token forwards of the draft model over the batch sizes, at the shortest context."""
    context = min(grid.context_lengths)
    samples = [LatencySample(b, 1, context, time_forward(runner, b, 1, context, grid.repeats, grid.warmup))
               for b in grid.batch_sizes]
    return fit_affine([s.batch_size for s in samples], [s.seconds for s in samples]), samples


def build_runner(model_dir: str | Path, grid: ProfileGrid, dtype: torch.dtype = torch.float32,
                 device: str = "cpu", batch_invariant: bool = False) -> ModelRunner:
    return ModelRunner.from_pretrained(model_dir, num_slots=max(grid.batch_sizes), capacity=grid.capacity,
                                       dtype=dtype, device=device, batch_invariant=batch_invariant)


def profile_checkpoint(model_dir: str | Path, grid: ProfileGrid, draft_model_dir: str | Path | None = None,
                       device: str = "cpu", source: str = "",
                       on_sample: Callable[[LatencySample], None] | None = None) -> tuple[CostModel, list[LatencySample]]:
    """Profile the target (and the draft model, if given) and fit the cost model."""
    # the target as the engine runs it by default; the draft model's numerics never matter
    samples = profile_runner(build_runner(model_dir, grid, device=device, batch_invariant=True), grid, on_sample)
    model = fit(samples, source=source)
    if draft_model_dir is not None:
        draft, _ = profile_draft_runner(build_runner(draft_model_dir, grid, device=device), grid)
        model = model.with_draft(draft)
    return model, samples
