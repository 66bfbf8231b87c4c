"""The grid of forwards a cost-model profile measures, and the fit over it. Imports no torch.

`specroll profile` times these forwards on real hardware (`specroll.profiling`); the simulator
evaluates its modelled worker on the same grid (`specroll.sim.profiled_cost`); both fit the
engine's `CostModel` to them with `fit_on_grid`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specroll.policies.cost_model import CostModel, LatencySample, fit, fit_affine

# (batch_size, num_tokens, context_length) -> seconds of one forward, context_length cached positions per row
ForwardTimer = Callable[[int, int, int], float]


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
    def standard(
        cls,
        max_batch_size: int,
        max_draft: int,
        context_lengths: tuple[int, ...] = (64, 512),
        repeats: int = 3,
    ) -> "ProfileGrid":
        """Powers of two up to max_batch_size; widths 1, 2, 3, 5, 9, ... up to max_draft + 1."""
        batches = powers_of_two(max_batch_size)
        widths = sorted({1, 2, *(w + 1 for w in powers_of_two(max_draft))})
        return cls(batches, tuple(widths), context_lengths, repeats)

    @classmethod
    def quick(cls, max_batch_size: int, max_draft: int, max_context: int) -> "ProfileGrid":
        """A few seconds' grid, for an engine pricing its own device (`engine.device_prices`): batches
        1, 4, 16, ... and max_batch_size; widths 1, 2 and max_draft + 1; contexts 0, 64 and 512 held to
        max_context (64 to half of it, so that a short cache still gives three); one warm-up and two
        timed repeats a point. Three contexts and two widths are the six points a fit needs at batch 1."""
        widths = sorted({1, min(2, max_draft + 1), max_draft + 1})
        contexts = sorted({0, min(64, max_context // 2), min(512, max_context)})
        return cls(powers(max_batch_size, 4), tuple(widths), tuple(contexts), repeats=2, warmup=1)

    @property
    def capacity(self) -> int:
        return max(self.context_lengths) + max(self.tokens_per_sequence)


def powers_of_two(limit: int) -> tuple[int, ...]:
    return powers(limit, 2)


def powers(limit: int, base: int) -> tuple[int, ...]:
    """1, base, base**2, ... up to limit, and limit itself."""
    values = [1]
    while values[-1] * base <= limit:
        values.append(values[-1] * base)
    if values[-1] != limit and limit > 0:
        values.append(limit)
    return tuple(values)


def fit_on_grid(
    grid: ProfileGrid,
    target: ForwardTimer,
    draft: ForwardTimer | None = None,
    source: str = "",
    on_sample: Callable[[LatencySample], None] | None = None,
) -> tuple[CostModel, list[LatencySample]]:
    """The cost model of `target`'s forwards on the grid (and the samples it was fitted to). With a
    draft model, its one-token forwards at the shortest context give D(b); without one, drafting is
    free (a model-free drafter's lookup costs next to nothing beside a forward)."""
    samples = []
    for context in grid.context_lengths:
        for batch in grid.batch_sizes:
            for width in grid.tokens_per_sequence:
                samples.append(LatencySample(batch, width, context, target(batch, width, context)))
                if on_sample is not None:
                    on_sample(samples[-1])
    model = fit(samples, source=source)
    if draft is None:
        return model, samples
    context = min(grid.context_lengths)
    seconds = [draft(batch, 1, context) for batch in grid.batch_sizes]
    return model.with_draft(fit_affine(grid.batch_sizes, seconds)), samples
