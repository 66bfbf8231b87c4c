"""The tail's and the drain's shares of a rollout's makespan, and its batch over time (`specroll.tail`),
on constructed iterations."""

import pytest

from specroll.tail import BatchSample, batch_at, drain_start_seconds, finish_seconds, tail_profile, tail_share


def test_tail_share_runs_from_the_ninetieth_percent_finish_not_from_ninety_percent_of_the_time():
    """20 requests: 18 finish by t=2, the 19th at 3, the 20th at 10; the makespan is 10. The tail starts
    at the 18th finish (t=2): 8 s of 10. Measured from 90 % of the makespan it would be 10 %; from the
    19th finish (the last 10 % rounded up), 70 %."""
    finish = [1.0] * 9 + [2.0] * 9 + [3.0, 10.0]
    assert tail_share(finish, 10.0) == pytest.approx(0.8)
    assert tail_share(finish, 20.0) == pytest.approx(0.4)  # the makespan is the denominator
    assert tail_share([], 5.0) == 0.0 and tail_share([1.0], 0.0) == 0.0


def _iterations(rows):
    return [BatchSample(*row) for row in rows]


# 6 requests at batch 4: two wait; the first finish (t=1) admits one, the second (t=2) the last; from
# the finish at t=3 none waits and the batch only shrinks.
QUEUED = _iterations(
    [
        # seconds, batch, finished, waiting after
        (0.5, 4, 0, 2),
        (1.0, 4, 1, 2),  # a finish, but two wait: the freed slot is refilled
        (2.0, 4, 1, 1),
        (3.0, 4, 1, 0),  # the drain starts here
        (4.0, 3, 0, 0),
        (6.0, 3, 2, 0),
        (10.0, 1, 1, 0),
    ]
)


def test_the_drain_starts_at_the_first_finish_that_leaves_none_waiting():
    assert drain_start_seconds(QUEUED, 10.0) == 3.0  # not 1.0, the first finish
    assert drain_start_seconds(QUEUED[:1], 10.0) == 10.0  # no finish yet: no drain


def test_each_finish_is_its_iterations_end():
    assert finish_seconds(QUEUED) == [1.0, 2.0, 3.0, 6.0, 6.0, 10.0]


def test_the_batch_at_a_moment_is_the_iteration_running_then():
    assert [batch_at(QUEUED, t) for t in (0.0, 0.5, 0.6, 3.5, 5.0, 9.9, 11.0)] == [4, 4, 4, 3, 3, 1, 1]
    assert batch_at([], 1.0) == 0


def test_the_profile_of_a_queued_rollout():
    """6 requests: the tail starts at the 6th finish (ceil(0.9 * 6) = 6), so it is empty; the drain runs
    from 3 s to 10 s."""
    profile = tail_profile(QUEUED, 10.0)
    assert profile.tail_share == 0.0
    assert profile.drain_share == pytest.approx(0.7)
    assert profile.batch_at == {"25%": 4, "50%": 3, "75%": 1, "90%": 1}


def test_one_straggler_is_the_whole_tail():
    """10 requests at batch 10: nine finish at 1 s, the last decodes alone to 5 s."""
    samples = _iterations([(0.5, 10, 0, 0), (1.0, 10, 9, 0), (3.0, 1, 0, 0), (5.0, 1, 1, 0)])
    profile = tail_profile(samples, 5.0)
    assert profile.tail_share == pytest.approx(0.8) and profile.drain_share == pytest.approx(0.8)
    assert profile.batch_at == {"25%": 1, "50%": 1, "75%": 1, "90%": 1}
    assert tail_profile(samples, 0.0).batch_at == {}
