"""The simulator's prediction of a measured multi-worker rollout (`sim.replay`)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specroll.policies.cost_model import CostModel
from specroll.rollout import PROFILES
from specroll.sim.replay import BatchedPrefillCost, MeasuredRollout, predict_makespan

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


def test_a_prefill_shares_its_forward():
    cost = BatchedPrefillCost(COST)
    assert cost.prefill_seconds(100) == pytest.approx(COST.forward_seconds(1, 100, 50.0) - COST.c_base)
    assert cost.prefill_seconds(0) == 0.0
