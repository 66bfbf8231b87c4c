"""Measures forward latency of a checkpoint on the machine at hand, for the cost model.

A forward of b rows, n new tokens each, after `context_length` cached positions is timed directly
on a `ModelRunner`: the cache's contents do not change the work, so nothing is prefilled.
Each point is the median of `repeats` timings after `warmup` untimed ones.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.cost_model import Affine, CostModel, LatencySample, fit, fit_affine
from specroll.policies.profile_grid import ProfileGrid


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
