import random

import pytest

from specroll.policies.bandit import BanditPolicy, Bucket
from specroll.policies.base import BatchView, RequestView, ForwardStats

MEAN_REWARD = {0: 100.0, 2: 160.0, 4: 200.0, 8: 150.0}  # tokens per second of each draft length


def run(policy, steps, batch_size=4, seed=1):
    noise = random.Random(seed)
    chosen = []
    for _ in range(steps):
        k = policy.select(batch_size)
        chosen.append(k)
        policy.record(MEAN_REWARD[k] * (1 + 0.3 * (noise.random() - 0.5)))
    return chosen


def test_converges_on_the_best_arm_of_a_synthetic_reward():
    policy = BanditPolicy(buckets=(Bucket(1, (0, 2, 4, 8)),), epsilon=0.1, window=16, seed=0)
    chosen = run(policy, 400)
    assert chosen[:4] == [0, 2, 4, 8]  # each arm once, first
    assert chosen[-200:].count(4) / 200 > 0.85
    assert max((0, 2, 4, 8), key=lambda k: policy.median_reward(0, k)) == 4


def test_seeded_runs_repeat():
    first = run(BanditPolicy(seed=3), 100)
    assert run(BanditPolicy(seed=3), 100) == first


def test_buckets_offer_their_own_arms():
    policy = BanditPolicy(buckets=(Bucket(1, (4,)), Bucket(16, (0,))))
    assert policy.select(15) == 4 and policy.select(16) == 0 and policy.select(500) == 0
    assert policy.bucket_index(15) == 0 and policy.bucket_index(16) == 1


def test_reward_is_tlt_tokens_per_second():
    policy = BanditPolicy(buckets=(Bucket(1, (2, 3)),))
    view = BatchView([RequestView(i, 0, 0, 100, 0, 0, 0) for i in range(4)], max_draft=8)
    assert policy.decide(view).draft_lengths == (2,) * 4
    # a_bar = 6 / 4 + 1 = 2.5; reward = 2.5 * 4 / 0.5 s = 20
    policy.observe(ForwardStats(4, 8, 6, 10, forward_seconds=0.4, draft_seconds=0.1))
    assert policy.median_reward(0, 2) == pytest.approx(20.0)


def test_validation():
    with pytest.raises(ValueError):
        BanditPolicy(buckets=(Bucket(2, (1,)),))
    with pytest.raises(ValueError):
        BanditPolicy(epsilon=1.5)
