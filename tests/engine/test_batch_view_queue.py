"""The policy sees the engine's queue: a batch with requests waiting for a slot does not drain, and
once every request holds one it does (`BatchView.num_waiting`, which `auto` counts by). It sees the
lengths requests finished with: the engine's recent ones, and per request its own prompt's, kept
across steps (`RequestView.prompt_lengths`)."""

from __future__ import annotations

from specroll.engine.engine import add_requests
from specroll.engine.request import Request
from specroll.policies.base import BatchView, DraftDecision, ForwardStats

from helpers import make_engine, rollout, workload


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


def test_the_policy_sees_each_prompts_lengths_from_the_step_before(qwen2_dir):
    """Two steps on the same prompts through one engine: the second step's first forward shows every
    request the lengths its own prompt's requests reached in the first step (prompt p may run
    12 + 5p tokens, so the prompts' lengths differ), one tuple shared by the prompt's requests."""
    policy = Views()
    engine = make_engine(qwen2_dir, policy=policy)
    first = workload(num_prompts=3, n=2)
    assert not add_requests(engine, first)
    engine.run()
    engine.advance_step(1)
    policy.batches.clear()
    second = [
        Request(r.request_id + 100, r.group_id, r.sample_index, r.prompt_token_ids, r.params) for r in first
    ]
    assert not add_requests(engine, second)
    engine.run()
    reached = {p: sorted(len(r.output_token_ids) for r in first if r.group_id == p) for p in range(3)}
    opening = policy.batches[0].requests
    assert len(opening) == 6 and {v.group_id: list(v.prompt_lengths) for v in opening} == reached
    siblings = [v.prompt_lengths for v in opening if v.group_id == 2]
    assert siblings[0] is siblings[1]
    last = {v.group_id: v.prompt_lengths for v in policy.batches[-1].requests}
    assert all(set(reached[p]) <= set(lengths) for p, lengths in last.items())
