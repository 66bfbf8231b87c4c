"""The policy sees the engine's queue: a batch with requests waiting for a slot does not drain, and
once every request holds one it does (`BatchView.num_waiting`, which `auto` counts by)."""

from __future__ import annotations

from specroll.policies.base import BatchView, DraftDecision, ForwardStats

from helpers import rollout, workload


class Views:
    name = "views"

    def __init__(self) -> None:
        self.batches: list[BatchView] = []

    def decide(self, batch: BatchView) -> DraftDecision:
        self.batches.append(batch)
        return DraftDecision.uniform(0, batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        pass

    def new_target(self) -> None:
        pass


def test_the_policy_sees_the_queue_drain(qwen2_dir):
    policy = Views()
    requests = workload(num_prompts=6, n=4, max_tokens=8)  # 24 requests through 8 slots
    rollout(qwen2_dir, requests, policy=policy, max_batch_size=8)
    waiting = [b.num_waiting for b in policy.batches]
    assert waiting[0] == 16 and not policy.batches[0].drains
    assert waiting[-1] == 0 and policy.batches[-1].drains
    assert waiting == sorted(waiting, reverse=True)  # the queue only empties: nothing arrives
