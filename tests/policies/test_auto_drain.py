"""`auto` in a batch that drains (nothing waits for a slot): tokens count by the pace of the request
that would finish last, so a full batch drafts only where its slowest requests gain."""

from dataclasses import replace

import pytest

from specroll.policies.auto import AutoPolicy, best_chain, draining_tokens
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel

# a CPU-like full batch: at batch 64 a forward one draft wider costs 1.24x a plain one
MODEL = CostModel(c_base=0.02, c_tok=1e-4)
NEVER_PROBE = dict(probe_every=10**9)


def test_draining_tokens_are_the_sum_where_requests_are_alike():
    assert draining_tokens([1.5] * 4, [100] * 4) == pytest.approx(6.0)
    assert draining_tokens([1.0] * 3, [40, 7, 90]) == pytest.approx(3.0)  # plain: one a request


def test_a_draining_batch_counts_the_pace_of_the_request_that_finishes_last():
    # both go 100 tokens: the batch ends when the request emitting 1.1 a forward does
    assert draining_tokens([1.8, 1.1], [100, 100]) == pytest.approx(2 * 1.1)
    # the slow one has 10 to go, the fast one 100: the fast one finishes last
    assert draining_tokens([1.1, 1.8], [10, 100]) == pytest.approx(2 * 1.8)


def _views(alphas: list[float], remaining: int = 200) -> list[RequestView]:
    """Requests whose lifetime counters say each one's acceptance (1,000 one-token drafts each)."""
    return [RequestView(i, i, 50, remaining, 1000, round(1000 * a), 1000) for i, a in enumerate(alphas)]


def test_best_chain_drafts_for_the_mean_but_not_where_the_slowest_gain_nothing():
    alphas = [0.7] * 32 + [0.05] * 32  # mean 0.375: one draft repays 1.24x on the sum
    limits = [8] * 64
    assert best_chain(MODEL, alphas, limits).cap >= 1
    assert best_chain(MODEL, alphas, limits, remaining=[200] * 64).cap == 0


def test_a_full_batch_with_a_queue_drafts_and_a_draining_one_does_not():
    alphas = [0.7] * 32 + [0.05] * 32
    queued = AutoPolicy(MODEL, **NEVER_PROBE).decide(BatchView(_views(alphas), 8, num_waiting=16))
    draining = AutoPolicy(MODEL, **NEVER_PROBE).decide(BatchView(_views(alphas), 8, num_waiting=0))
    assert max(queued.draft_lengths) >= 1 and max(draining.draft_lengths) == 0


def test_a_draining_batch_of_alike_requests_drafts_as_a_queued_one():
    views = _views([0.7] * 64)
    queued = AutoPolicy(MODEL, **NEVER_PROBE).decide(BatchView(views, 8, num_waiting=16))
    draining = AutoPolicy(MODEL, **NEVER_PROBE).decide(BatchView(views, 8, num_waiting=0))
    assert draining.draft_lengths == queued.draft_lengths and max(draining.draft_lengths) >= 1


def test_an_engine_that_does_not_say_its_queue_counts_the_sum():
    assert not BatchView(_views([0.5]), 8).drains and BatchView(_views([0.5]), 8, num_waiting=0).drains


def test_sampled_remaining_lengths_average_the_pace_over_who_finishes_last():
    # sample 1: the slow request (1.1 a forward) has furthest to go; sample 2: the fast one (1.8)
    samples = [[100, 10], [10, 100]]
    expected = 2 * 100 / ((100 / 1.1 + 100 / 1.8) / 2)
    assert draining_tokens([1.1, 1.8], samples) == pytest.approx(expected)
    assert draining_tokens([1.1, 1.8], [[100, 10]]) == pytest.approx(draining_tokens([1.1, 1.8], [100, 10]))


def _spread_history(num: int = 400) -> list[int]:
    """Long-tailed finished lengths, 60 to 1,000 tokens."""
    return sorted(60 + (i * i) % 941 for i in range(num))


def test_one_slow_request_among_many_does_not_stop_a_drain_from_drafting():
    """63 requests accept 0.7 and one 0.05, all as long with as much budget: by the budget alone the
    slow one finishes last and nothing is worth drafting; by the lengths finished requests reached,
    any of them may be the last, and most accept well."""
    views = _views([0.7] * 63 + [0.05], remaining=950)
    by_budget = best_chain(MODEL, [0.7] * 63 + [0.05], [8] * 64, remaining=[950] * 64)
    drained = AutoPolicy(MODEL, **NEVER_PROBE).decide(
        BatchView(views, 8, num_waiting=0, finished_lengths=_spread_history())
    )
    assert by_budget.cap == 0 and max(drained.draft_lengths) >= 1


def test_half_slow_requests_still_keep_a_drain_from_drafting():
    """Where half the batch accepts little, one of them is nearly always among the last."""
    views = _views([0.7] * 32 + [0.05] * 32, remaining=950)
    drained = AutoPolicy(MODEL, **NEVER_PROBE).decide(
        BatchView(views, 8, num_waiting=0, finished_lengths=_spread_history())
    )
    assert max(drained.draft_lengths) == 0


def test_a_drain_reads_each_requests_own_prompts_lengths_before_the_pool():
    """Half the batch accepts 0.7, half 0.05, all 50 tokens in. By the pool every request may run on
    to 1,000 tokens, so a slow one is nearly always among the last and nothing is worth drafting; by
    their own prompts' lengths the slow ones stop at 55 and the fast ones run to 1,000, so the fast
    ones finish last and drafting speeds the drain."""
    alphas = [0.7] * 32 + [0.05] * 32
    pool = _spread_history()
    fast, slow = (1000,) * 8, (55,) * 8
    by_pool = BatchView(_views(alphas, remaining=950), 8, num_waiting=0, finished_lengths=pool)
    own = [replace(v, prompt_lengths=fast if v.request_id < 32 else slow) for v in by_pool.requests]
    by_prompt = replace(by_pool, requests=own)
    assert max(AutoPolicy(MODEL, **NEVER_PROBE).decide(by_pool).draft_lengths) == 0
    assert max(AutoPolicy(MODEL, **NEVER_PROBE).decide(by_prompt).draft_lengths) >= 1
