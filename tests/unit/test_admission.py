"""The engine's admission rules, shared by its scheduler and the simulator's workers; torch-free."""

from __future__ import annotations

from specroll.engine.admission import is_admission_due, num_to_admit, plan_prefill_forwards


def test_a_busy_engine_waits_for_an_eighth_of_its_slots_or_every_waiting_request():
    assert is_admission_due(num_running=0, num_free_slots=1, num_waiting=9, num_slots=32)  # idle: at once
    assert not is_admission_due(num_running=29, num_free_slots=3, num_waiting=9, num_slots=32)  # 3 < 32 / 8
    assert is_admission_due(num_running=28, num_free_slots=4, num_waiting=9, num_slots=32)
    assert is_admission_due(num_running=30, num_free_slots=2, num_waiting=2, num_slots=32)  # room for all


def test_prefills_are_cut_longest_first_where_padding_is():
    assert plan_prefill_forwards([5, 300, 290, 6, 4], min_saving=100) == [[1, 2], [3, 0, 4]]
    assert plan_prefill_forwards([5, 300, 290], min_saving=10**6) == [[1, 2, 0]]


def test_an_admission_takes_one_request_per_free_slot_within_the_prefill_budget():
    assert num_to_admit([100, 200, 300], num_free_slots=2, max_prefill_tokens=10_000) == 2
    assert num_to_admit([100, 200, 300], num_free_slots=5, max_prefill_tokens=300) == 2  # 100 + 200
    assert num_to_admit([5000, 10], num_free_slots=5, max_prefill_tokens=300) == 1  # the first always goes
    assert num_to_admit([], num_free_slots=5, max_prefill_tokens=300) == 0
