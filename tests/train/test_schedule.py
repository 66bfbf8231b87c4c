"""The dataset visited epoch by epoch: every problem once per epoch, in a seeded order."""

from __future__ import annotations

import pytest

from specroll.train.schedule import EpochSchedule


def test_every_problem_recurs_once_an_epoch():
    schedule = EpochSchedule(tuple(range(10, 16)), num_prompts=4, seed=1)
    steps = [schedule.step_problems(s) for s in range(3)]  # 12 draws = 2 epochs
    flat = [p for step in steps for p in step]
    assert sorted(flat[:6]) == sorted(flat[6:]) == list(range(10, 16))
    assert flat[:6] != flat[6:]  # each epoch is shuffled afresh
    assert steps == [EpochSchedule(tuple(range(10, 16)), 4, seed=1).step_problems(s) for s in range(3)]


def test_a_dataset_of_one_step_is_prompted_whole_every_step():
    schedule = EpochSchedule((3, 1, 2), num_prompts=3)
    assert all(sorted(schedule.step_problems(s)) == [1, 2, 3] for s in range(4))


def test_a_step_cannot_take_more_than_the_dataset():
    with pytest.raises(ValueError, match="num_prompts=4"):
        EpochSchedule((1, 2, 3), num_prompts=4)
