"""Prefills split by prompt length: literal groups, and outputs unchanged by the split."""

from __future__ import annotations

from specroll.engine.stepper import prefill_groups
from specroll.engine.request import Request, SamplingParams

from helpers import assert_same_rollout, rollout, workload


def request(request_id: int, num_prompt_tokens: int) -> Request:
    return Request(request_id, request_id, 0, tuple(range(2, 2 + num_prompt_tokens)), SamplingParams())


def test_groups_are_longest_first_and_cut_where_padding_is():
    requests = [request(0, 5), request(1, 300), request(2, 290), request(3, 6), request(4, 4)]
    groups = prefill_groups(requests, min_saving=100)
    assert [[r.request_id for r in g] for g in groups] == [[1, 2], [3, 0, 4]]
    assert prefill_groups(requests, min_saving=10**6) == [sorted(requests, key=lambda r: -r.num_tokens)]


def test_outputs_do_not_depend_on_the_split(qwen2_dir):
    split = rollout(qwen2_dir, workload(num_prompts=8, n=3), min_prefill_split=1)
    split_prefills = rollout.last_engine.telemetry.num_prefills
    whole = rollout(qwen2_dir, workload(num_prompts=8, n=3), min_prefill_split=10**9)
    assert split_prefills > rollout.last_engine.telemetry.num_prefills  # the split did happen
    assert [r.output_token_ids for r in split] == [r.output_token_ids for r in whole]
    for a, b in zip(split, whole):
        assert max((abs(x - y) for x, y in zip(a.output_logprobs, b.output_logprobs)), default=0.0) <= 1e-5


def test_a_groups_prompt_is_computed_once_with_the_tokens_of_separate_prefills(qwen2_dir, one_thread):
    """Four samples of each of six prompts admitted together: each prompt's context is computed once
    and copied to its other samples' caches; every token and log-probability equals an engine that
    prefills each request alone (one slot)."""
    shared = rollout(qwen2_dir, workload(6, 4))
    telemetry = rollout.last_engine.telemetry
    alone = rollout(qwen2_dir, workload(6, 4), max_batch_size=1)
    assert_same_rollout(alone, shared)
    prompts = {r.prompt_token_ids for r in shared}
    assert telemetry.prefill_tokens == sum(len(p) for p in prompts)  # once a prompt, not once a sample
    assert rollout.last_engine.telemetry.prefill_tokens == sum(len(r.prompt_token_ids) for r in shared)
