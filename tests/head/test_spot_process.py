"""The spot trainer in a process of its own: its updates run in another pid, on the embeddings as the
last policy update left them; its weights reach the drafter while a training step is still under
way; pause, resume, train_now and stop do what they say; and a trainer that raises or dies leaves the
rollout drafting on its last weights, with the failure said."""

from __future__ import annotations

import functools
import os
import time

import pytest
import torch

from specroll.head.spot_process import ProcessSpotTrainer
from spot_doubles import (
    CONFIG,
    DyingTrainer,
    RaisingTrainer,
    RecordingTrainer,
    StallingTrainer,
    tiny_drafter,
    tiny_features,
)


def _start(make_trainer, publish_every: int = 2):
    drafter = tiny_drafter()
    spot = ProcessSpotTrainer(drafter, CONFIG, publish_every=publish_every, make_trainer=make_trainer)
    features = tiny_features(drafter)
    spot.add(0, features, [1.0] * len(features))
    return drafter, spot


def _records(path) -> list[tuple[int, float]]:
    return [
        (int(pid), float(total)) for pid, total in (line.split() for line in path.read_text().splitlines())
    ]


def test_updates_run_in_another_process_on_the_embeddings_of_the_last_policy_update(tmp_path):
    path = tmp_path / "updates.txt"
    drafter, spot = _start(functools.partial(RecordingTrainer, path))
    try:
        spot.resume()
        assert spot.wait_for_updates(2)
        spot.pause()
        first = _records(path)
        assert {pid for pid, _ in first} == {spot.process.pid} != {os.getpid()}
        drafter.embedding.mul_(2.0)  # the policy's update changed the target's embeddings, in place
        spot.resume()  # the trainer reads them from now on
        assert spot.wait_for_updates(spot.stats.num_updates + 2)
        spot.pause()
        later = _records(path)[len(first) :]
        expected = float(drafter.embedding.float().sum())
        assert later and all(total == pytest.approx(expected, rel=1e-4) for _, total in later)
        assert first[0][1] == pytest.approx(expected / 2, rel=1e-4)
    finally:
        spot.stop()


def test_weights_reach_the_drafter_and_are_swapped_while_a_training_step_is_under_way():
    drafter, spot = _start(StallingTrainer, publish_every=1)
    before = drafter.head.lm_head.weight.clone()
    try:
        spot.resume()
        assert spot.wait_for_updates(1)  # the second update now sleeps for half a minute
        deadline = time.monotonic() + 10  # the weights of the first come up beside it, not after it
        while spot.stats.num_published < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.perf_counter()
        drafter.propose([])  # the rollout's next proposal: it swaps them in, waiting for nothing
        assert time.perf_counter() - started < 1.0
        assert drafter.num_swaps == 1 and not torch.equal(drafter.head.lm_head.weight, before)
        assert spot.stats.num_updates == 1  # the stalled step still runs
    finally:
        spot.stop()  # ends the stalled process
    assert not spot.process.is_alive()


def test_pause_holds_the_updates_resume_goes_on_and_train_now_runs_them_at_once():
    drafter, spot = _start(RecordingTrainer.__mro__[1], publish_every=100)  # a plain HeadTrainer
    try:
        assert spot.train_now(3) > 0 and spot.stats.num_updates == 3  # never resumed: between steps
        drafter.propose([])
        assert drafter.num_swaps == 1  # offered at once, though fewer than publish_every
        spot.resume()
        assert spot.wait_for_updates(5)
        spot.pause()
        paused_at = spot.stats.num_updates
        time.sleep(0.5)
        assert spot.stats.num_updates == paused_at  # paused: no update ran
        drafter.propose([])
        assert drafter.num_swaps == 2  # pause offered what was trained
        assert spot.num_positions == sum(s.num_positions for s in tiny_features(drafter))
    finally:
        spot.stop()
    assert spot.process.exitcode == 0 and spot.failure is None


@pytest.mark.parametrize(
    "trainer, said", [(RaisingTrainer, "the head's loss went NaN"), (DyingTrainer, "exit code 3")]
)
def test_a_failing_trainer_leaves_the_rollout_drafting_on_its_last_weights(trainer, said):
    drafter, spot = _start(trainer, publish_every=1)
    try:
        with pytest.warns(RuntimeWarning, match="the rollout goes on drafting with the head's last weights"):
            spot.resume()
            assert not spot.wait_for_updates(10)  # the trainer ends at its third update
        assert said in spot.failure
        spot.pause()  # returns: there is no trainer left to wait for
        assert spot.train_now(5) >= 0 and spot.stats.num_updates == 2
        drafter.propose([])
        # the second update's weights, the last offered (a process killed outright may take them along)
        assert drafter.num_swaps == (1 if trainer is RaisingTrainer else min(1, spot.stats.num_published))
        spot.add(1, tiny_features(drafter), [1.0] * 4)  # the rollout's next step buffers, for nothing
        spot.resume()
    finally:
        spot.stop()
