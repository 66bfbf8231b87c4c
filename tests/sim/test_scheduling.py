"""Literal cases for the torch-free scheduling policies."""

import numpy as np
import pytest

from specroll.policies.cost_model import Affine
from specroll.policies.speculation_math import alpha_from_acceptance_length, expected_tokens
from specroll.scheduling.adaptive_range import AdaptiveDraftRange
from specroll.scheduling.context_aware import ContextAwareOrder, FifoOrder
from specroll.scheduling.divided import ChunkPolicy, select_instance
from specroll.scheduling.fastest_of_n import FonCandidate, assign_fastest_of_n
from specroll.scheduling.decoupled_plan import (
    coupled_tgs,
    decoupled_expected_tokens,
    plan_decoupled,
    reconfigure,
)
from specroll.scheduling.static import assign_groups


def test_decoupled_tau_literal():
    # w=1: reject (1-p) yields 1/2, accept p yields 1.
    assert float(decoupled_expected_tokens(0.6, 1)) == pytest.approx(0.4 * 0.5 + 0.6)
    assert float(decoupled_expected_tokens(0.8, 4)) == pytest.approx(2.2952)


def test_coupled_tgs_uses_the_expected_tokens_of_a_draft():
    draft, verify = Affine(1e-3, 1e-4), Affine(1e-2, 1e-3)
    seconds = 4 * draft(8) + verify(8)
    assert coupled_tgs(0.8, 4, 8, draft, verify) == pytest.approx(3.3616 / seconds)


def test_alpha_inversion_round_trips():
    alpha = alpha_from_acceptance_length(2.53, 8)
    assert expected_tokens(alpha, 8) == pytest.approx(2.53, rel=1e-6)


def test_static_assignment_is_balanced_and_seeded():
    a = assign_groups(10, 4, np.random.default_rng(1))
    b = assign_groups(10, 4, np.random.default_rng(1))
    assert (a == b).all()
    assert sorted(np.bincount(a, minlength=4)) == [2, 2, 3, 3]


def test_chunk_and_least_loaded_instance():
    assert ChunkPolicy(8192).chunk_end(10000, 20000) == 18192
    assert ChunkPolicy(8192).chunk_end(15000, 20000) == 20000
    reserved = np.array([500.0, 100.0, 50.0])
    running = np.array([1, 1, 4])
    assert select_instance(reserved, running, 1000.0, 4, 200.0) == 1  # worker 2 is full of requests
    assert select_instance(reserved, running, 1000.0, 4, 950.0) is None


def test_context_aware_serves_probes_shortest_first_then_longest_group():
    groups = [0, 0, 1, 1]
    order = ContextAwareOrder(groups, max_tokens=100)
    for request_id in range(4):
        order.push(request_id, 0)
    order.on_progress(0, 5)
    first = order.pop()
    assert first in (0, 2) and order.is_probe(first)
    second = order.pop()
    assert {first, second} == {0, 2}
    order.on_finished(0, 30)  # group 0 estimated at 30; group 1 still unknown (100)
    assert order.pop() == 3  # longest estimated group first
    assert order.pop() == 1
    assert order.pop() is None


def test_fifo_requeue_keeps_front():
    order = FifoOrder()
    order.push(1, 0)
    order.push(2, 0)
    order.requeue(order.pop(), 0)
    assert order.pop() == 1


def test_fastest_of_n_draft_first_lowest_acceptance_first():
    candidates = [FonCandidate(7, 0.9, 100, frozenset({0})), FonCandidate(3, 0.2, 10, frozenset({0}))]
    chosen = assign_fastest_of_n(candidates, [0, 1, 2], free_workers=[10, 11], worker_drafter={}, max_batch=1)
    assert [(a.request_id, a.drafter, a.worker) for a in chosen] == [(3, 1, 10), (3, 2, 11)]


def test_plan_decoupled_and_reconfigure():
    draft = lambda g_d: Affine(1e-3, 1e-5)
    verify = lambda g_v, w: Affine(0.013, 1e-4 * (w + 1) * 4 / g_v)
    plan = plan_decoupled(1024, 64, (4, 8), 0.7, draft, verify)
    assert plan.num_draft_gpus <= plan.num_verify_gpus and plan.window >= 1
    plans = reconfigure(np.array([0.1, 0.9]), plan, draft(1), lambda w: verify(plan.num_verify_gpus, w))
    assert plans[1] is None and plans[0] is not None and plans[0].window <= plan.window


def test_adaptive_range():
    draft_range = AdaptiveDraftRange(8, 128)
    assert [draft_range.draft_len(b) for b in (1, 16, 64, 256)] == [8, 8, 2, 0]


def test_worker_loads_heap_matches_the_linear_scan():
    """WorkerLoads (the fast path) against select_instance (the slow reference), seeded random updates."""
    from specroll.scheduling.divided import WorkerLoads

    rng = np.random.default_rng(3)
    loads = WorkerLoads(16, kv_capacity=1000.0, max_num_seqs=4)
    for _ in range(500):
        index = int(rng.integers(16))
        loads.update(index, float(rng.integers(0, 1000)), int(rng.integers(0, 5)))
        need = float(rng.integers(1, 400))
        expected = select_instance(loads.reserved, loads.running, 1000.0, 4, need)
        assert loads.select(need) == expected


def _slow_longest_waiting_group(estimate, executed, num_waiting) -> int:
    masked = np.where(num_waiting > 0, estimate, -np.inf)
    best = masked == masked.max()
    return int(np.argmin(np.where(best, executed, np.inf)))


def test_context_aware_heap_matches_the_linear_scan():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(12), 4)
    order = ContextAwareOrder(groups, max_tokens=1000)
    for request_id in rng.permutation(len(groups)):
        order.push(int(request_id), 0)
    while len(order._probes):
        order.pop()
    for _ in range(30):
        group = _slow_longest_waiting_group(order._estimate, order._executed, order._num_waiting)
        request_id = order.pop()
        assert groups[request_id] == group
        order.on_progress(request_id, int(rng.integers(1, 50)))
        if rng.random() < 0.5:
            order.on_finished(request_id, int(rng.integers(1, 1000)))
        elif len(order) < 20:
            order.push(request_id, 10)
