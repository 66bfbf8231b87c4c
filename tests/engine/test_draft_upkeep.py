"""A draft model that did not draft for some forwards catches up in a forward of its own, reported
apart (`ForwardStats.upkeep_seconds`) and left out of what a policy prices (`steady_seconds`)."""

from __future__ import annotations

from helpers import rollout, workload

from specroll.drafting.draft_model import DraftModelDrafter
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.rollout import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL


class DraftEveryFourth:
    """Plain decoding, but two drafts a request every fourth forward: each drafting forward follows
    three the draft model was not fed."""

    name = "every-fourth"

    def __init__(self) -> None:
        self.stats: list[ForwardStats] = []

    def decide(self, batch: BatchView) -> DraftDecision:
        return DraftDecision.uniform(2 if len(self.stats) % 4 == 3 else 0, batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        self.stats.append(stats)

    def new_target(self) -> None:
        pass


def test_a_catch_up_is_reported_apart_and_priced_by_no_forward():
    requests = workload(num_prompts=2, n=2, max_tokens=24)
    plain = rollout(DEFAULT_MODEL, workload(num_prompts=2, n=2, max_tokens=24))
    policy = DraftEveryFourth()
    drafter = DraftModelDrafter.from_pretrained(DEFAULT_DRAFT_MODEL, 4, 64)
    spec = rollout(DEFAULT_MODEL, requests, drafter, policy, max_batch_size=4)
    assert [r.output_token_ids for r in spec] == [r.output_token_ids for r in plain]
    drafting = [s for s in policy.stats if s.num_drafted]
    plain_forwards = [s for s in policy.stats if not s.num_drafted]
    assert drafting and all(s.upkeep_seconds > 0 for s in drafting)  # three forwards behind, each time
    assert all(s.upkeep_seconds == 0 for s in plain_forwards)
    for s in drafting:
        assert 0 < s.upkeep_seconds <= s.draft_seconds
        assert s.steady_seconds == s.forward_seconds + s.draft_seconds - s.upkeep_seconds
