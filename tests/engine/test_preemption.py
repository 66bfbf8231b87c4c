"""Preemption under a small KV budget keeps every token: outputs equal the unconstrained rollout."""

from __future__ import annotations

from specroll.drafting.prompt_lookup import PromptLookupDrafter
from specroll.policies.fixed import FixedDraftLength

from helpers import rollout, workload


def test_preempted_requests_resume_without_losing_tokens(qwen2_dir):
    free = rollout(qwen2_dir, workload())
    tight = rollout(qwen2_dir, workload(), PromptLookupDrafter(), FixedDraftLength(4), kv_budget_tokens=200)
    assert sum(r.num_preemptions for r in tight) > 0
    for a, b in zip(free, tight):
        assert a.output_token_ids == b.output_token_ids
        assert (
            a.output_logprobs == b.output_logprobs
            or max(abs(x - y) for x, y in zip(a.output_logprobs, b.output_logprobs)) <= 1e-5
        )


def test_every_request_finishes_once_with_its_limit(qwen2_dir):
    requests = rollout(qwen2_dir, workload(), kv_budget_tokens=150)
    for r in requests:
        assert r.is_finished and r.finish_reason in ("stop", "length")
        assert 1 <= r.num_output_tokens <= r.params.max_tokens
        assert len(r.output_logprobs) == r.num_output_tokens
