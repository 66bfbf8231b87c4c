"""Combining drafters: every member drafts, and each query takes the draft expected to gain most.

A draft's expected gain is the sum of its tokens' scores (path probabilities), i.e. its estimated number
of accepted tokens, so a short confident draft beats a long doubtful one. Every lifecycle call is
forwarded to all members, so each keeps its own state.
"""

from __future__ import annotations

from typing import Sequence

from specroll.drafting.protocol import (
    BaseDrafter,
    Draft,
    Drafter,
    DraftQuery,
    RequestInfo,
    TargetFeatures,
    TrainableHead,
)
from specroll.drafting.suffix_draft import expected_accepted


class CombinedDrafter(BaseDrafter):
    """Chooses per query, by score, among the drafts of its member drafters."""

    name = "combined"

    def __init__(self, drafters: Sequence[Drafter]) -> None:
        if not drafters:
            raise ValueError("CombinedDrafter needs at least one drafter")
        self.drafters = list(drafters)

    @property
    def needs_features(self) -> bool:
        return any(d.needs_features for d in self.drafters)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        wanted = {tuple(d.feature_layers) for d in self.drafters if d.needs_features}
        if len(wanted) > 1:
            raise ValueError(f"drafters combined read different target layers: {sorted(wanted)}")
        return wanted.pop() if wanted else ()

    @property
    def drafts_trees(self) -> bool:
        return any(d.drafts_trees for d in self.drafters)

    def observe_features(self, features: TargetFeatures) -> None:
        for drafter in self.drafters:
            if drafter.needs_features:
                drafter.observe_features(features)

    def begin(self, info: RequestInfo) -> None:
        for drafter in self.drafters:
            drafter.begin(info)

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        per_drafter = [drafter.propose(queries) for drafter in self.drafters]
        return [self._best(candidates) for candidates in zip(*per_drafter)]

    def _best(self, candidates: Sequence[Draft]) -> Draft:
        index = max(range(len(candidates)), key=lambda i: expected_accepted(candidates[i]))
        best = candidates[index]
        if best.token_ids and not best.source:
            best.source = self.drafters[index].name
        return best

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        for drafter in self.drafters:
            drafter.observe(request_id, token_ids)

    def finish(self, request_id: int) -> None:
        for drafter in self.drafters:
            drafter.finish(request_id)

    def advance_step(self, step: int) -> None:
        for drafter in self.drafters:
            drafter.advance_step(step)

    def upkeep_seconds(self) -> float:
        return sum(drafter.upkeep_seconds() for drafter in self.drafters)

    def trainable_head(self) -> TrainableHead | None:
        """The first member's draft head (`head+suffix`: the draft head's): every member is given
        the target's features, so the head trains online as it would alone."""
        return next((h for h in (d.trainable_head() for d in self.drafters) if h is not None), None)
