"""The simulator's prediction of a measured rollout (`sim.prediction`) and its workers' engine rules."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specroll.engine.admission import plan_prefill_forwards
from specroll.policies.cost_model import CostModel
from specroll.engine.choices import PROFILES
from specroll.sim.roofline import prefill_seconds
from specroll.sim.profiled_cost import ProfiledCost
from specroll.sim.prediction import MeasuredRollout, predict_engine_makespan, predict_makespan, scaled
from specroll.sim.worker import EngineRules, Worker

COST = CostModel.load(PROFILES / "policy.cost.json")


def rollout(num_groups=16, n=8, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(4.5, 0.7, num_groups * n).astype(int), 1, 256)
    return MeasuredRollout(lengths, np.repeat(np.arange(num_groups), n), np.full(num_groups * n, 30), 256)


def test_records_give_dense_groups_and_lengths():
    records = [SimpleNamespace(prompt_id=p, token_ids=[1] * k) for p, k in ((7, 3), (7, 5), (2, 4))]
    measured = MeasuredRollout.from_records(records, [10, 10, 20], 8)
    assert measured.group_ids.tolist() == [0, 0, 1] and measured.lengths.tolist() == [3, 5, 4]


def test_one_worker_without_chunk_ends_is_one_batch_under_any_dispatch():
    measured = rollout()
    static = predict_makespan(measured, "static", 1, 256, 256, COST)
    assert predict_makespan(measured, "divided", 1, 256, 256, COST) == pytest.approx(static, rel=1e-6)


def test_more_workers_finish_sooner_and_chunks_pay_their_re_prefills():
    measured = rollout()
    one, two = (predict_makespan(measured, "divided", w, 64, 256, COST) for w in (1, 2))
    assert two < one
    assert predict_makespan(measured, "divided", 2, 64, 16, COST) > two  # 16-token chunks re-prefill often


def test_requests_admitted_together_share_prefill_forwards_and_get_their_first_token():
    worker = Worker(0, 1, 1e9, 8, np.array([300, 290, 5]), rules=EngineRules(8, min_prefill_split=100))
    for request_id, prompt in enumerate((300, 290, 5)):
        worker.add(request_id, 0, 0.0, 50.0, float(prompt))
    cost = ProfiledCost(COST)
    worker.admit(cost)
    assert plan_prefill_forwards([300, 290, 5], 100) == [[0, 1], [2]]  # two forwards, not three
    shared = prefill_seconds(cost, [300, 290]) + prefill_seconds(cost, [5])
    assert worker.pending_seconds == pytest.approx(shared)
    assert worker.positions.tolist() == [1.0, 1.0, 1.0] and worker.waiting == []


def test_a_busy_engine_admits_once_an_eighth_of_its_slots_is_free():
    worker = Worker(0, 1, 1e9, 100, 10, rules=EngineRules(32))
    for request_id in range(40):
        worker.add(request_id, 0, 0.0, 50.0, 10.0)
    worker.admit(ProfiledCost(COST))
    assert worker.num_in_batch == 32 and len(worker.waiting) == 8  # idle: it fills every slot
    worker.remove(np.arange(32) < 3)
    worker.admit(ProfiledCost(COST))
    assert worker.num_in_batch == 29  # 3 free slots of 32: it waits for 4
    worker.remove(np.arange(29) < 1)
    worker.admit(ProfiledCost(COST))
    assert worker.num_in_batch == 32 and len(worker.waiting) == 4


def test_an_engine_reads_each_attention_chunk_to_its_longest_row():
    worker = Worker(0, 1, 1e9, 8, np.array([10, 10, 10, 10]), rules=EngineRules(8))
    for request_id in range(4):
        worker.add(request_id, 0, 0.0, 500.0, 10.0)
    worker.admit(ProfiledCost(COST))
    worker.positions = np.array([1.0, 589.0, 2.0, 590.0])  # contexts 11, 599, 12, 600, in slot order
    # with each row's new token: one cut saves 512 positions, between rows 0 and 1; the rest read to 601
    assert worker._positions_read() == 12 + 3 * 601 - 4
    assert Worker(0, 1, 1e9, 8, 10)._positions_read() == 0.0


def test_a_worker_ends_requests_at_their_length_but_reserves_the_dispatchers_chunk():
    worker = Worker(0, 1, 1e9, 8, 10, output_lengths=np.array([40]))
    worker.add(0, 0, 0.0, 128.0, 10.0)
    worker.admit(ProfiledCost(COST))
    assert worker.stops.tolist() == [40.0] and worker.reserved_tokens() == 10 + 128


def test_each_report_idles_the_worker_once_per_finishing_iteration():
    lengths = np.arange(20, 30)  # ten requests, all admitted at once, each finishing in its own iteration
    measured = MeasuredRollout(lengths, np.arange(10), np.full(10, 30), 64)
    quiet = predict_makespan(measured, "static", 1, 16, 64, COST, report_seconds=0.0, contention=0.0)
    reported = predict_makespan(measured, "static", 1, 16, 64, COST, report_seconds=0.01, contention=0.0)
    assert reported - quiet == pytest.approx(9 * 0.01)  # no report after the last: nothing waits for it


def test_contention_slows_workers_only_while_others_compute_beside_them():
    equal = MeasuredRollout(np.full(16, 100), np.repeat([0, 1], 8), np.full(16, 30), 128)
    alone, shared = (
        predict_makespan(equal, "static", 2, 8, 128, COST, report_seconds=0.0, contention=c)
        for c in (0.0, 0.25)
    )
    assert shared == pytest.approx(1.25 * alone)  # one group each, both busy to the end
    unequal = MeasuredRollout(np.repeat([50, 100], 8), np.repeat([0, 1], 8), np.full(16, 30), 128)
    alone, shared = (
        predict_makespan(unequal, "static", 2, 8, 128, COST, report_seconds=0.0, contention=c)
        for c in (0.0, 0.25)
    )
    assert alone < shared < 1.25 * alone  # the longer group runs alone, at full pace, once the shorter ends


def test_the_level_is_measured_on_one_engine_and_scales_every_forward():
    measured = rollout()
    engine = predict_engine_makespan(measured, 32, COST)
    # proportional but for whole positions in the attention chunks' padding
    assert predict_engine_makespan(measured, 32, scaled(COST, 1.5)) == pytest.approx(1.5 * engine, rel=1e-3)
    # one engine queues everything and admits by its rules: slower than two, faster than its requests in turn
    assert predict_makespan(measured, "static", 2, 32, 256, COST) < engine
