"""Which rows a prefill forward computes when a group's samples share their prompt (torch-free)."""

from __future__ import annotations

from specroll.engine.shared_prefill import plan_shared_prefill


def test_equal_fresh_contexts_are_computed_once_by_the_first():
    plan = plan_shared_prefill([(1, 2, 3), (4, 5), (1, 2, 3), (1, 2, 3), (4, 5)], [True] * 5)
    assert plan.computed == [0, 1]
    assert plan.row_of == [0, 1, 0, 0, 1]
    assert plan.copies == [(0, 2), (0, 3), (1, 4)]


def test_a_request_with_a_cache_or_another_context_computes_its_own():
    """A resumed request (something cached) never shares, nor lends its row to a fresh one."""
    plan = plan_shared_prefill([(1, 2), (1, 2), (1, 2), (1, 2, 9)], [False, True, True, True])
    assert plan.computed == [0, 1, 3]
    assert plan.row_of == [0, 1, 1, 2]
    assert plan.copies == [(1, 2)]


def test_no_sharing_computes_every_row():
    plan = plan_shared_prefill([(1,), (2,), (3,)], [True, True, True])
    assert plan.computed == [0, 1, 2] and plan.row_of == [0, 1, 2] and plan.copies == []
