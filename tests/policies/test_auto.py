import itertools

import pytest

from specroll.policies.auto import AutoPolicy, best_chain
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.speculation_math import expected_tokens

MODEL = CostModel(c_base=2e-3, c_tok=1e-4)


def rate_padded(lengths, alphas, model=MODEL):
    return sum(expected_tokens(a, k) for a, k in zip(alphas, lengths)) / model.step_seconds(
        len(alphas), max(lengths)
    )


@pytest.mark.parametrize("alphas", [(0.9, 0.5, 0.2), (0.3, 0.3, 0.95), (0.7, 0.7, 0.7)])
def test_padded_cap_matches_brute_force(alphas):
    limits = [5, 5, 2]
    brute = max(rate_padded(ks, alphas) for ks in itertools.product(*(range(l + 1) for l in limits)))
    assert rate_padded(best_chain(MODEL, alphas, limits).lengths, alphas) == pytest.approx(brute)


def test_high_acceptance_small_batch_drafts_to_the_cap():
    assert best_chain(MODEL, [0.95], [8]).lengths == [8]


def test_large_batch_low_acceptance_falls_back_to_plain_decoding():
    assert best_chain(MODEL, [0.2] * 128, [8] * 128).lengths == [0] * 128


def test_policy_uses_each_requests_live_acceptance_and_remaining_tokens():
    policy = AutoPolicy(MODEL)
    views = [RequestView(0, 0, 50, 100, 40, 38, 10), RequestView(1, 0, 50, 2, 40, 38, 10)]
    lengths = policy.decide(BatchView(views, max_draft=6)).draft_lengths
    assert lengths == (6, 1)  # request 1 may emit two more tokens: one draft at most


def test_policy_backs_off_when_its_drafts_are_rejected():
    policy = AutoPolicy(MODEL)
    views = [RequestView(i, 0, 50, 100, 0, 0, 0) for i in range(16)]
    assert policy.decide(BatchView(views, max_draft=8)).draft_lengths[0] > 0  # the prior says try
    for step in range(1, 6):  # every draft rejected at its first token
        views = [RequestView(i, 0, 50, 100, 4 * step, 0, step) for i in range(16)]
        lengths = policy.decide(BatchView(views, max_draft=8)).draft_lengths
    assert lengths == (0,) * 16
