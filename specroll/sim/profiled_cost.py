"""The bridge between the engine's cost model and the simulator's, both ways. Imports no torch.

The engine's policies reason with `specroll.policies.cost_model.CostModel`, the fit `specroll profile`
writes (t(b, n, ctx) with ctx the cached positions of one row); the simulator's workers cost forwards
through the `ForwardCost` protocol (num_seqs, tokens_per_seq, and the batch's KV context in total).
The two context units meet here only:

    ProfiledCost       a profile as one simulated worker's ForwardCost (`specroll simulate --cost-model`)
    ProfiledDraftCost  the profile's D(b), as the ForwardCost of a model drafter
    forward_seconds_per_row  a ForwardCost asked in the CostModel's unit (context per row)
    profile_forward_cost  a CostModel fitted to a simulated worker on the grid `specroll profile`
                       measures (`fit_on_grid`), so that the engine's policies running in the
                       simulator reason with the simulated hardware's shape
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from specroll.policies.cost_model import Affine, CostModel
from specroll.policies.profile_grid import ProfileGrid, fit_on_grid
from specroll.sim.roofline import ForwardCost


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
        """The inverse of `forward_seconds_per_row`: the batch's context shared out over its rows."""
        per_row_context = context_tokens / num_seqs if num_seqs else 0.0
        return self.model.forward_seconds(num_seqs, tokens_per_seq, per_row_context)


@dataclass(frozen=True)
class ProfiledDraftCost:
    """A profile's D(b) = draft_base + draft_row * b per draft token: one forward of the draft model."""

    draft: Affine

    def forward_seconds(self, num_seqs: int, tokens_per_seq: float, context_tokens: float) -> float:
        return tokens_per_seq * self.draft(num_seqs)


def forward_seconds_per_row(
    cost: ForwardCost, num_seqs: int, tokens_per_seq: float, context_per_row: float
) -> float:
    """A forward with `context_per_row` cached positions in each row (the CostModel's unit)."""
    return cost.forward_seconds(num_seqs, tokens_per_seq, num_seqs * context_per_row)


def profile_forward_cost(
    cost: ForwardCost, grid: ProfileGrid, draft: ForwardCost | None = None, source: str = ""
) -> CostModel:
    """Fit a CostModel to a simulated worker's forwards on `grid`, the forwards `specroll profile`
    times on real hardware, with the model drafter's D(b) where there is one (`fit_on_grid`)."""
    drafting = None if draft is None else partial(forward_seconds_per_row, draft)
    return fit_on_grid(grid, partial(forward_seconds_per_row, cost), drafting, source)[0]
