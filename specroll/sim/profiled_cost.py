"""The bridge between the engine's cost model and the simulator's, both ways. Imports no torch.

The engine's policies reason with `specroll.policies.cost_model.CostModel`, the fit `specroll profile`
writes (t(b, n, ctx) with ctx the cached positions of one row); the simulator's workers cost forwards
through the `ForwardCost` protocol (num_seqs, tokens_per_seq, and the batch's KV context in total).

    ProfiledCost       a profile as one simulated worker's ForwardCost (`specroll simulate --cost-model`)
    ProfiledDraftCost  the profile's D(b), as the ForwardCost of a model drafter
    profile_forward_cost  the other way: a CostModel fitted to a simulated worker on the grid
                       `specroll profile` measures, so that the engine's policies running in the
                       simulator reason with the simulated hardware's shape
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specroll.policies.cost_model import Affine, CostModel, LatencySample, fit, fit_affine
from specroll.policies.profile_grid import ProfileGrid
from specroll.sim.cost_model import ForwardCost


@dataclass(frozen=True)
class ProfiledCost:
    """A `specroll profile` fit as one worker's ForwardCost.

    A profile is one measured worker: it does not scale with the number of GPUs a plan gives the
    worker. It says nothing about memory, so `kv_capacity_tokens` comes from elsewhere (the preset's
    roofline). Its prefills are priced as every worker's, by `cost_model.prefill_seconds`.
    """

    model: CostModel
    kv_capacity_tokens: float = float("inf")

    def forward_seconds(self, num_seqs: int, tokens_per_seq: float, context_tokens: float) -> float:
        per_row_context = context_tokens / num_seqs if num_seqs else 0.0
        return self.model.forward_seconds(num_seqs, tokens_per_seq, per_row_context)

    @classmethod
    def load(cls, path: str | Path, kv_capacity_tokens: float = float("inf")) -> "ProfiledCost":
        return cls(CostModel.load(path), kv_capacity_tokens)


@dataclass(frozen=True)
class ProfiledDraftCost:
    """A profile's D(b) = draft_base + draft_row * b per draft token: one forward of the draft model."""

    draft: Affine

    def forward_seconds(self, num_seqs: int, tokens_per_seq: float, context_tokens: float) -> float:
        return tokens_per_seq * self.draft(num_seqs)


def profile_forward_cost(cost: ForwardCost, grid: ProfileGrid, draft: ForwardCost | None = None,
                         source: str = "") -> CostModel:
    """Fit a CostModel to a simulated worker's forwards on `grid`, the forwards `specroll profile`
    times on real hardware (each context in the grid is one row's). With a model drafter, its
    one-token forwards at the shortest context give D(b); without one, drafting is free (a model-free
    drafter's lookup costs next to nothing beside a forward)."""
    samples = [LatencySample(b, n, ctx, cost.forward_seconds(b, n, b * ctx))
               for ctx in grid.context_lengths for b in grid.batch_sizes for n in grid.tokens_per_sequence]
    model = fit(samples, source=source)
    if draft is None:
        return model
    context = min(grid.context_lengths)
    seconds = [draft.forward_seconds(b, 1, b * context) for b in grid.batch_sizes]
    return model.with_draft(fit_affine(grid.batch_sizes, seconds))
