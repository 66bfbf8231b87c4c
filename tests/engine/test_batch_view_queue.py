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


def test_the_policy_sees_the_lengths_of_finished_requests(qwen2_dir):
    """`BatchView.finished_lengths`, which `auto` samples a drain's remaining lengths from: sorted,
    growing as requests finish, and in the end the lengths of all but the last to finish."""
    policy = Views()
    requests = workload(num_prompts=6, n=4, max_tokens=8)
    rollout(qwen2_dir, requests, policy=policy, max_batch_size=8)
    seen = [list(b.finished_lengths) for b in policy.batches]
    assert seen[0] == [] and all(s == sorted(s) for s in seen)
    assert [len(s) for s in seen] == sorted(len(s) for s in seen) and len(seen[-1]) >= 16
    lengths = sorted(len(r.output_token_ids) for r in requests)
    assert all(n in lengths for n in seen[-1])
