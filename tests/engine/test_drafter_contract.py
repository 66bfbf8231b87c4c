"""A drafter written to the `Drafter` protocol alone (no `BaseDrafter`, nothing else the engine might
reach for) runs in the engine: drafts proposed, verified, accepted, and plain's tokens kept."""

from __future__ import annotations

from typing import Sequence

from helpers import assert_lossless, rollout, workload

from specroll.drafting.protocol import Draft, Drafter, DraftQuery, RequestInfo, TargetFeatures, TrainableHead
from specroll.policies.fixed import FixedDraftLength


class ReplayingDrafter:
    """Proposes each request's recorded continuation: exactly the protocol's members."""

    name = "replaying"
    needs_features = False
    feature_layers: tuple[int, ...] = ()
    member_names: frozenset[str] = frozenset()
    drafts_trees = False

    def __init__(self, outputs: dict[int, list[int]]) -> None:
        self.outputs, self.done, self.calls, self.steps = outputs, {}, [], []

    def begin(self, info: RequestInfo) -> None:
        self.done[info.request_id] = 0

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        self.calls.append(len(queries))
        return [self._next(q) for q in queries]

    def _next(self, query: DraftQuery) -> Draft:
        start = len(query.context) - query.num_prompt_tokens
        return Draft(query.request_id, self.outputs[query.request_id][start : start + query.budget])

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self.done[request_id] += len(token_ids)

    def observe_features(self, features: TargetFeatures) -> None:
        raise AssertionError("a drafter that needs no features is never given any")

    def finish(self, request_id: int) -> None:
        del self.done[request_id]

    def advance_step(self, step: int) -> None:
        self.steps.append(step)

    def member(self, name: str | None) -> Drafter:
        if name not in (None, self.name):
            raise KeyError(f"{self.name} has no member {name!r}")
        return self

    def draft_cost(self) -> tuple[float, float] | None:
        return (0.0, 0.0)  # replaying a record costs nothing: (intercept, slope) of seconds a token

    def trainable_head(self) -> TrainableHead | None:
        return None

    def upkeep_seconds(self) -> float:
        return 0.0


def test_a_drafter_written_to_the_protocol_alone_runs_in_the_engine(qwen2_dir):
    plain = rollout(qwen2_dir, workload(num_prompts=3))
    drafter = ReplayingDrafter({r.request_id: list(r.output_token_ids) for r in plain})
    assert isinstance(drafter, Drafter)
    spec = rollout(qwen2_dir, workload(num_prompts=3), drafter, FixedDraftLength(3))
    assert_lossless(plain, spec, rollout.last_engine)
    assert drafter.calls and drafter.done == {}  # proposed, and every request's lifecycle closed
