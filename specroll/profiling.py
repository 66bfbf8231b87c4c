"""Measures forward latency of a checkpoint on the machine at hand, for the cost model.

A forward of b rows, n new tokens each, after `context_length` cached positions is timed directly
on a `ModelRunner`: the cache's contents do not change the work, so nothing is prefilled.
Each point is the median of `repeats` timings after `warmup` untimed ones. The fit records the
device type it was measured on (`CostModel.device`): it prices forwards there only.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from specroll.model.runner import ModelRunner, SequenceInput
from specroll.placement import is_batch_invariant
from specroll.policies.cost_model import CostModel, LatencySample
from specroll.policies.profile_grid import ForwardTimer, ProfileGrid, fit_on_grid


def time_forward(
    runner: ModelRunner, batch_size: int, num_tokens: int, context_length: int, repeats: int, warmup: int
) -> float:
    """Median seconds of one forward of `batch_size` rows x `num_tokens` after `context_length`."""
    inputs = [
        SequenceInput(slot, context_length, [2] * num_tokens, num_logits=num_tokens)
        for slot in range(batch_size)
    ]
    if runner.static is not None:  # untimed until the shape's graph is recorded (`Replayer.min_uses`)
        warmup = max(warmup, runner.static.replayer.min_uses)
    timings = []
    for i in range(warmup + repeats):
        started = time.perf_counter()
        runner.forward(inputs)
        if runner.device.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def forward_timer(runner: ModelRunner, grid: ProfileGrid) -> ForwardTimer:
    """Median seconds of a forward on `runner`, timed as the grid says."""
    return lambda batch, width, context: time_forward(
        runner, batch, width, context, grid.repeats, grid.warmup
    )


def build_runner(
    model_dir: str | Path,
    grid: ProfileGrid,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    batch_invariant: bool = False,
    cuda_graphs: bool = False,
) -> ModelRunner:
    runner = ModelRunner.from_pretrained(
        model_dir,
        num_slots=max(grid.batch_sizes),
        capacity=grid.capacity,
        dtype=dtype,
        device=device,
        batch_invariant=batch_invariant,
    )
    if cuda_graphs:  # as the engine runs its verification forwards
        runner.use_static_forwards(max(grid.tokens_per_sequence))
    return runner


def profile_checkpoint(
    model_dir: str | Path,
    grid: ProfileGrid,
    draft_model_dir: str | Path | None = None,
    device: str = "cpu",
    source: str = "",
    on_sample: Callable[[LatencySample], None] | None = None,
    dtype: torch.dtype = torch.float32,
    cuda_graphs: bool = False,
) -> tuple[CostModel, list[LatencySample]]:
    """Profile the target (and the draft model, if given) on `device` and fit the cost model."""
    # the target as the engine runs it by default (batch-invariant on the CPU only); the draft
    # model's numerics never matter
    numerics = is_batch_invariant(device, fast_numerics=False)
    runner = build_runner(model_dir, grid, dtype, device, numerics, cuda_graphs)
    draft = None
    if draft_model_dir is not None:
        draft = forward_timer(build_runner(draft_model_dir, grid, dtype, device), grid)
    return profile_runner(runner, grid, draft=draft, source=source, on_sample=on_sample)


def profile_runner(
    runner: ModelRunner, grid: ProfileGrid, **fit: Any
) -> tuple[CostModel, list[LatencySample]]:
    """The cost model of `runner`'s forwards on the grid, marked with the device type it was measured
    on (and the samples it was fitted to); `fit` is `fit_on_grid`'s draft (the draft model's timer,
    for D(b)), source and on_sample."""
    model, samples = fit_on_grid(grid, forward_timer(runner, grid), **fit)
    return replace(model, device=runner.device.type), samples
