import pytest

from specroll.policies.acceptance_estimates import AcceptanceTracker
from specroll.policies.base import BatchView, RequestView


def view(request_id, drafted, accepted, output=10):
    return RequestView(request_id, 0, output, 100, drafted, accepted, 0)


def batch(*views):
    return BatchView(list(views), max_draft=8)


def test_counts_trials_up_to_the_first_rejection():
    tracker = AcceptanceTracker(prior_alpha=0.5, prior_strength=0.0)
    tracker.update(batch(view(7, 0, 0)))
    tracker.update(batch(view(7, 4, 2)))  # 2 accepted, then a rejection: 3 trials
    tracker.update(batch(view(7, 8, 6)))  # all 4 accepted: 4 trials, no rejection
    assert tracker.alpha(7) == pytest.approx(6 / 7)


def test_unseen_history_reads_accepted_over_drafted_and_shrinks_toward_the_pool():
    tracker = AcceptanceTracker(prior_alpha=0.5, prior_strength=2.0)
    tracker.update(batch(view(1, 10, 8), view(2, 10, 2)))
    pooled = (10 + 2 * 0.5) / (20 + 2)
    assert tracker.pooled_alpha == pytest.approx(pooled)
    assert tracker.alpha(1) == pytest.approx((8 + 2 * pooled) / (10 + 2))
    assert tracker.alpha(99) == pytest.approx(pooled)


def test_requests_that_leave_are_recorded_as_finished():
    tracker = AcceptanceTracker()
    tracker.update(batch(view(1, 0, 0, output=5), view(2, 0, 0, output=7)))
    tracker.update(batch(view(2, 0, 0, output=9)))
    assert tracker.finished_lengths == [5]


def test_a_new_target_forgets_acceptance_and_keeps_finished_lengths():
    tracker = AcceptanceTracker(prior_alpha=0.5, prior_strength=2.0)
    tracker.update(batch(view(1, 10, 1, output=30), view(2, 10, 1)))
    tracker.update(batch(view(2, 10, 1)))  # request 1 finished, 30 tokens long
    assert tracker.pooled_trials > 0 and tracker.pooled_alpha < 0.5
    tracker.new_target()
    assert tracker.pooled_trials == 0 and tracker.pooled_alpha == 0.5 and tracker.alpha(2) == 0.5
    assert tracker.finished_lengths == [30]
