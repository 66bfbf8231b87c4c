"""Scheduler (torch-free): admission, slots, the KV budget, LIFO preemption."""

from __future__ import annotations

import pytest

from specroll.engine.request import Request, SamplingParams, Status
from specroll.engine.scheduler import Scheduler, SchedulerConfig


def request(i, prompt_len=10, max_tokens=20):
    return Request(i, i, 0, tuple(range(2, 2 + prompt_len)), SamplingParams(max_tokens=max_tokens))


def ran(scheduler, r, tokens, num_written):
    """What the engine does after a forward over `r` completed: commit its tokens, confirm its cache."""
    r.commit(tokens, [0.0] * len(tokens), frozenset())
    scheduler.confirm(r, num_written)


def test_admits_in_order_up_to_slots():
    s = Scheduler(SchedulerConfig(num_slots=2, capacity=64, kv_budget_tokens=1000))
    for i in range(3):
        s.add(request(i))
    d = s.schedule()
    assert [r.request_id for r in d.prefill] == [0, 1] and [r.slot for r in d.prefill] == [0, 1]
    assert [r.request_id for r in s.waiting] == [2]


def test_budget_preempts_latest_and_requeues_it_first():
    s = Scheduler(SchedulerConfig(num_slots=4, capacity=64, kv_budget_tokens=40, reserve_per_request=2))
    for i in range(3):
        s.add(request(i))
    first = s.schedule()  # each needs 10 + 2: three fit in 40
    assert len(first.prefill) == 3
    for r in first.prefill:
        ran(s, r, [5] * 4, 13)  # each now 14 + 2 = 16: three need 48 > 40
    second = s.schedule()
    assert [r.request_id for r in second.preempted] == [2]
    assert first.prefill[2].status is Status.WAITING and first.prefill[2].num_preemptions == 1
    assert s.waiting[0].request_id == 2 and [r.request_id for r in second.decode] == [0, 1]


def test_finish_frees_slot_for_next():
    s = Scheduler(SchedulerConfig(num_slots=1, capacity=64, kv_budget_tokens=1000))
    s.add(request(0))
    s.add(request(1))
    r0 = s.schedule().prefill[0]
    s.finish(r0)
    assert r0.status is Status.FINISHED and r0.slot is None
    assert [r.request_id for r in s.schedule().prefill] == [1]


def test_too_long_request_is_refused():
    s = Scheduler(SchedulerConfig(num_slots=1, capacity=32, kv_budget_tokens=1000))
    with pytest.raises(ValueError, match="exceeds the context"):
        s.add(request(0, prompt_len=20, max_tokens=20))


def test_finished_holes_are_filled_by_moving_the_highest_slots():
    s = Scheduler(SchedulerConfig(num_slots=4, capacity=64, kv_budget_tokens=1000, admit_fraction=1.0))
    for i in range(4):
        s.add(request(i))
    running = s.schedule().prefill
    for r in running:
        ran(s, r, [5], 10)  # the prefill's token: the cache holds the 10 prompt positions
    s.finish(running[0])
    s.finish(running[1])
    d = s.schedule()
    assert [(m.request_id, m.source, m.target, m.length) for m in d.moves] == [(3, 3, 0, 10), (2, 2, 1, 10)]
    assert [r.slot for r in d.decode] == [0, 1]


def test_admission_waits_for_enough_free_slots():
    s = Scheduler(SchedulerConfig(num_slots=8, capacity=64, kv_budget_tokens=1000, admit_fraction=0.5))
    for i in range(12):
        s.add(request(i))
    running = s.schedule().prefill
    assert len(running) == 8
    for r in running:
        ran(s, r, [5], 10)
    s.finish(running[0])
    assert s.schedule().prefill == []  # one free slot of 8: wait
    for r in running[1:4]:
        s.finish(r)
    assert len(s.schedule().prefill) == 4


def test_a_running_request_has_all_but_its_newest_token_cached():
    s = Scheduler(SchedulerConfig(num_slots=2, capacity=64, kv_budget_tokens=1000))
    s.add(request(0, prompt_len=6))
    (admitted,) = s.schedule().prefill
    assert admitted.num_cached == 0 and admitted.pending_tokens() == list(range(2, 8))
    ran(s, admitted, [9], 6)  # the prefill wrote the 6 prompt positions and emitted one token
    ran(s, admitted, [10, 11], 2)  # a forward wrote 9 and one accepted draft, 10, and emitted 10, 11
    (decoding,) = s.schedule().decode
    assert decoding.num_cached == 8 and decoding.pending_tokens() == [11]


def test_an_unconfirmed_forward_counts_nothing_as_cached():
    """A forward that did not complete confirms nothing: a prefill is run again from scratch, a
    decode feeds the same pending token again, and nothing is counted as cached meanwhile."""
    s = Scheduler(SchedulerConfig(num_slots=2, capacity=64, kv_budget_tokens=1000))
    s.add(request(0, prompt_len=6))
    s.add(request(1, prompt_len=4))
    prefilled, unconfirmed = s.schedule().prefill
    ran(s, prefilled, [9], 6)  # request 1's prefill raised: no token, no confirmation
    d = s.schedule()
    assert d.prefill == [unconfirmed] and unconfirmed.num_cached == 0
    assert unconfirmed.pending_tokens() == [2, 3, 4, 5]
    assert d.decode == [prefilled] and prefilled.num_cached == 6
    # the decode forward over `prefilled` raised too: the next schedule feeds it the same token
    (again,) = s.schedule().decode
    assert again.num_cached == 6 and again.pending_tokens() == [9]


def test_confirming_other_than_the_context_needs_raises():
    s = Scheduler(SchedulerConfig(num_slots=1, capacity=64, kv_budget_tokens=1000))
    s.add(request(0, prompt_len=6))
    (r,) = s.schedule().prefill
    r.commit([9], [0.0], frozenset())
    with pytest.raises(RuntimeError, match="wrote 5 positions after 0"):
        s.confirm(r, 5)  # a prefill that wrote part of the prompt: one prompt token would be missing
    assert r.num_cached == 0
    s.confirm(r, 6)
    s.finish(r)
    with pytest.raises(RuntimeError, match="finished"):
        s.confirm(r, 1)


def _steady_pair(budget=1000, num_slots=4, admit_fraction=0.125):
    """Two requests admitted and prefilled in slots 0 and 1 (each 10 prompt + 1 output token)."""
    s = Scheduler(
        SchedulerConfig(
            num_slots=num_slots, capacity=64, kv_budget_tokens=budget, admit_fraction=admit_fraction
        )
    )
    for i in range(2):
        s.add(request(i, max_tokens=5))
    running = s.schedule().prefill
    for r in running:
        ran(s, r, [5], 10)
    return s, running


def test_a_batch_is_steady_when_the_next_schedule_would_change_nothing():
    s, running = _steady_pair()
    assert s.is_steady()
    before = [(r.slot, r.num_cached) for r in running]
    decision = s.schedule()  # what is_steady predicted: the same requests, nothing moved
    assert not decision.prefill and not decision.moves and not decision.preempted
    assert [(r.slot, r.num_cached) for r in decision.decode] == before


def test_a_batch_is_not_steady_with_a_hole_an_admission_or_a_budget_to_exceed():
    s, running = _steady_pair()
    s.finish(running[0])  # slot 0 frees: `_compact` would move request 1 down
    assert not s.is_steady()
    s, _ = _steady_pair(admit_fraction=0.25)
    s.add(request(9))  # two slots free, one waiting: admission is due
    assert not s.is_steady()
    s, _ = _steady_pair(budget=2 * (11 + 1))  # exactly full now: one token more each would preempt
    assert not s.is_steady()
    s, _ = _steady_pair(budget=2 * (12 + 1))
    assert s.is_steady()
    assert not Scheduler(SchedulerConfig(num_slots=2, capacity=64, kv_budget_tokens=100)).is_steady()
