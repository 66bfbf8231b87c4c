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


def test_a_new_target_carries_the_pooled_alpha_as_a_prior_and_keeps_finished_lengths():
    tracker = AcceptanceTracker(prior_alpha=0.5, prior_strength=2.0, carried_trials=3.0)
    tracker.update(batch(view(1, 10, 1, output=30), view(2, 10, 1)))
    tracker.update(batch(view(2, 10, 1)))  # request 1 finished, 30 tokens long
    old = (2 + 2 * 0.5) / (20 + 2)  # 2 of 20 trials (accepted / drafted, the conservative reading)
    assert tracker.pooled_trials == 20 and tracker.pooled_alpha == pytest.approx(old)
    tracker.new_target()
    # 3 trials of the old pooled alpha carried, shrunk toward the prior as any 3 trials would be
    assert tracker.pooled_trials == 3.0
    assert tracker.pooled_alpha == pytest.approx((3 * old + 2 * 0.5) / (3 + 2))
    assert tracker.alpha(2) == tracker.pooled_alpha  # request 2's own counts are forgotten
    assert tracker.finished_lengths == [30]


def test_a_new_target_starts_from_what_the_old_one_accepted_not_from_the_prior():
    tracker = AcceptanceTracker(prior_alpha=0.6, prior_strength=4.0)
    for step in range(1, 41):  # 40 forwards of one-token drafts, a fifth accepted
        tracker.update(batch(view(1, step, step // 5)))
    before = tracker.pooled_alpha
    assert before < 0.3
    tracker.new_target()
    assert tracker.pooled_trials == tracker.carried_trials
    assert abs(tracker.pooled_alpha - before) < 0.05  # not 0.6 again
    assert AcceptanceTracker(carried_trials=0.0).pooled_alpha == 0.6  # carrying nothing: the prior


def test_finished_lengths_keep_the_last_window_only():
    from specroll.policies.remaining_lengths import WINDOW

    tracker = AcceptanceTracker()
    for request_id in range(WINDOW + 10):  # each request seen once, then gone at the next update
        tracker.update(batch(view(request_id, 0, 0, output=request_id)))
    tracker.update(batch())
    assert len(tracker.finished_lengths) == WINDOW
    assert tracker.finished_lengths[-1] == WINDOW + 9 and tracker.finished_lengths[0] == 10
