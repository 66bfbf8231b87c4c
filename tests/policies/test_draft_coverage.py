"""The share of asked draft tokens a drafter proposes, and `auto` pricing a forward by it: a drafter
that proposes for a quarter of the requests is not worth a forward 1.3x as wide, however well its
few drafts are accepted."""

from __future__ import annotations

import pytest

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.draft_coverage import DraftCoverage

WIDTH_COSTS = CostModel(c_base=0.02, c_tok=0.00107)  # batch 8: a one-draft forward 1.30x a plain one


def test_the_share_starts_at_the_prior_and_follows_what_was_proposed():
    coverage = DraftCoverage(prior_share=1.0, prior_strength=8.0, half_life=1e9)
    assert coverage.share == 1.0
    coverage.record([1] * 8, [1, 1, 0, 0, 0, 0, 0, 0])
    assert coverage.share == pytest.approx((2 + 8) / (8 + 8))
    coverage.record([2, 2], [5, 0])  # a proposal longer than asked counts as asked
    assert coverage.share == pytest.approx((2 + 2 + 8) / (12 + 8))
    coverage.record([0, 0], [0, 0])  # nothing asked: nothing learnt
    assert coverage.asked == pytest.approx(12)


def test_old_forwards_fade():
    coverage = DraftCoverage(prior_strength=0.0, half_life=8.0)
    coverage.record([1] * 8, [0] * 8)
    coverage.record([1] * 8, [1] * 8)
    assert coverage.share == pytest.approx(8 / (8 + 4))  # the first forward weighs half


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="prior_share"):
        DraftCoverage(prior_share=1.5)


def _batch(num_drafted: int) -> BatchView:
    """Requests 0 and 1 drafted and kept every draft; the other six were never proposed one."""
    views = [
        RequestView(i, 0, 20, 500, num_drafted if i < 2 else 0, num_drafted if i < 2 else 0, 50, 60)
        for i in range(8)
    ]
    return BatchView(views, max_draft=4)


def test_auto_does_not_widen_a_forward_for_drafts_most_requests_will_not_get():
    def policy() -> AutoPolicy:
        auto = AutoPolicy(WIDTH_COSTS, warmup_trials=0, probe_every=10**9)
        auto.decide(_batch(0))
        auto.decide(_batch(100))  # the tracker sees 100 drafts kept by requests 0 and 1
        return auto

    everyone = policy()
    assert any(everyone.decide(_batch(100)).draft_lengths)  # drafts kept, a drafter that always proposes
    quarter = policy()
    for _ in range(20):
        quarter.coverage.record([1] * 8, [1, 1, 0, 0, 0, 0, 0, 0])
    assert quarter.coverage.share < 0.35
    assert not any(quarter.decide(_batch(100)).draft_lengths)  # 1 + 0.3 * 0.98 tokens: not worth 1.3x
