"""Samples of a draining batch's remaining lengths: from the lengths its own prompt's finished
requests reached past a request's own, else those of any finished request, else uniform over its
budget; and their expectation, checked against the samples."""

import random

import numpy as np
import pytest

from specroll.policies.remaining_lengths import (
    MIN_OUTLIVING,
    MIN_PROMPT_OUTLIVING,
    FinishedLengths,
    expected_remaining,
    sample_remaining,
)


def test_finished_lengths_keep_a_sorted_window():
    lengths = FinishedLengths(window=3)
    for n in (50, 10, 30, 20):
        lengths.add(n)
    assert lengths.sorted().tolist() == [10, 20, 30] and len(lengths) == 3


def test_a_request_runs_on_as_the_finished_requests_that_outlived_it_did():
    finished = np.array([5] * 50 + [40] * MIN_OUTLIVING)  # only the 40s outlived a 30-token request
    samples = sample_remaining([30], [100], finished, 200, random.Random(0))
    assert samples.shape == (200, 1) and set(samples[:, 0].tolist()) == {10.0}


def test_the_budget_caps_a_sample_and_a_sample_is_at_least_one():
    finished = np.array([500] * MIN_OUTLIVING)
    assert set(sample_remaining([30], [7], finished, 50, random.Random(0))[:, 0].tolist()) == {7.0}


def test_too_few_outliving_lengths_fall_back_to_uniform_over_the_budget():
    finished = np.array([5] * 100 + [40] * (MIN_OUTLIVING - 1))
    samples = sample_remaining([30, 3], [20, 20], finished, 4000, random.Random(1))
    assert samples[:, 0].min() == 1 and samples[:, 0].max() == 20  # uniform 1..20
    assert abs(samples[:, 0].mean() - 10.5) < 0.5
    assert set(samples[:, 1].tolist()) <= {2.0, 37.0} | set(
        map(float, range(1, 21))
    )  # history: 5-3, 40-3 capped
    assert samples[:, 1].max() == 20.0


def test_no_history_at_all_is_uniform_and_seeded():
    a = sample_remaining([0, 0], [10, 10], np.array([], dtype=np.int64), 8, random.Random(3))
    b = sample_remaining([0, 0], [10, 10], np.array([], dtype=np.int64), 8, random.Random(3))
    assert np.array_equal(a, b) and a.min() >= 1 and a.max() <= 10


def test_a_request_runs_on_as_its_own_prompts_requests_did_not_as_the_pool_says():
    pool = np.array([1000] * 100)  # every other prompt runs to 1,000 tokens
    own = (20,) * 3 + (60,) * MIN_PROMPT_OUTLIVING  # this prompt's: only the 60s outlived 30 tokens
    samples = sample_remaining([30, 30], [2000, 2000], pool, 200, random.Random(0), [own, ()])
    assert set(samples[:, 0].tolist()) == {30.0}  # 60 - 30, from its own prompt
    assert set(samples[:, 1].tolist()) == {970.0}  # no history of its own: the pool's 1000 - 30


def test_too_few_of_its_own_prompts_lengths_outliving_it_fall_back_to_the_pool():
    pool = np.array([1000] * 100)
    own = (20,) * 10 + (60,) * (MIN_PROMPT_OUTLIVING - 1)
    samples = sample_remaining([30], [2000], pool, 200, random.Random(0), [own])
    assert set(samples[:, 0].tolist()) == {970.0}


def test_its_own_prompts_lengths_are_drawn_over_all_that_outlived_it_capped_by_the_budget():
    own = (10, 40, 50, 60, 500)
    samples = sample_remaining([30], [100], np.array([], dtype=np.int64), 4000, random.Random(2), [own])
    assert set(samples[:, 0].tolist()) == {10.0, 20.0, 30.0, 100.0}
    assert abs((samples[:, 0] == 100.0).mean() - 0.25) < 0.03


def test_own_prompt_lengths_leave_the_draw_seeded_and_the_others_untouched():
    pool = np.array([5] * 50 + [40] * MIN_OUTLIVING)
    plain = sample_remaining([30, 3], [100, 100], pool, 16, random.Random(4))
    mixed = sample_remaining(
        [30, 3], [100, 100], pool, 16, random.Random(4), [(), (9,) * MIN_PROMPT_OUTLIVING]
    )
    again = sample_remaining(
        [30, 3], [100, 100], pool, 16, random.Random(4), [(), (9,) * MIN_PROMPT_OUTLIVING]
    )
    assert np.array_equal(mixed, again) and np.array_equal(mixed[:, 0], plain[:, 0])
    assert set(mixed[:, 1].tolist()) == {6.0}


def test_expected_remaining_literal_cases():
    finished = np.array([5] * 50 + [40] * MIN_OUTLIVING)  # only the 40s outlived a 30-token request
    assert expected_remaining([30], [100], finished).tolist() == [10.0]
    assert expected_remaining([30], [7], finished).tolist() == [7.0]  # capped by its budget
    mixed = np.array([40] * 4 + [60] * 4)  # 10 and 30 to go; the budget caps the 30 at 20
    assert expected_remaining([30], [20], mixed).tolist() == [15.0]
    assert expected_remaining([30, 50], [9, 9], np.array([40] * (MIN_OUTLIVING - 1))).tolist() == [9.0, 9.0]


def test_expected_remaining_is_the_mean_of_the_samples_where_history_suffices():
    finished = np.sort(np.random.default_rng(1).integers(10, 400, 300))
    lengths, budgets = [0, 50, 200, 350], [120, 500, 60, 40]
    samples = sample_remaining(lengths, budgets, finished, 40_000, random.Random(0))
    assert expected_remaining(lengths, budgets, finished) == pytest.approx(samples.mean(axis=0), rel=0.02)
