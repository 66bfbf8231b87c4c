"""Exploration priced against the horizon: literal gains and prices, the break-even horizon, the work
a batch view says is left, and a Monte Carlo reference for the expected gain."""

import math

import numpy as np
import pytest

from specroll.policies.base import BatchView, RequestView
from specroll.policies.exploration import (
    Probe,
    expected_gain,
    horizon_tokens,
    is_worth_probing,
    probe_price,
    seconds_left,
)
from specroll.policies.remaining_lengths import MIN_OUTLIVING


def test_expected_gain_literal_cases():
    assert expected_gain(1.2, 1.0, 0.0) == pytest.approx(0.2)  # no doubt: the gain, if any
    assert expected_gain(0.8, 1.0, 0.0) == 0.0
    # as good as the plan: sigma * phi(0), sigma = 0.25
    assert expected_gain(1.0, 1.0, 0.25) == pytest.approx(0.25 / math.sqrt(2 * math.pi))
    # 0.8 of the plan, sigma = 0.2, z = -1: 0.2 phi(-1) - 0.2 Phi(-1)
    assert expected_gain(0.8, 1.0, 0.25) == pytest.approx(0.2 * 0.2419707 - 0.2 * 0.1586553, rel=1e-6)
    assert expected_gain(8.0, 10.0, 0.25) == pytest.approx(expected_gain(0.8, 1.0, 0.25))  # scale-free


@pytest.mark.parametrize("prospect, spread", [(0.8, 0.25), (1.1, 0.1), (0.5, 0.5)])
def test_expected_gain_matches_a_monte_carlo_reference(prospect, spread):
    rates = np.random.default_rng(0).normal(prospect, spread * prospect, 400_000)
    reference = np.maximum(0.0, rates - 1.0).mean()
    assert expected_gain(prospect, 1.0, spread) == pytest.approx(reference, rel=0.03, abs=1e-4)


def test_probe_price_is_the_seconds_its_forwards_lose_beside_the_plan():
    # 3 forwards of 2 s emitting at half the plan's rate: half of each is lost
    assert probe_price(Probe(seconds=2.0, rate=0.5, prospect_rate=0.8, num_forwards=3), 1.0) == 3.0
    assert probe_price(Probe(2.0, 1.5, 1.5), 1.0) == 0.0  # a probe faster than the plan costs nothing


def test_a_probe_pays_past_its_break_even_horizon():
    # price 0.2 s; gain 0.016663 a second, earned over the seconds left after its 1 s forward: ~13 s
    probe = Probe(seconds=1.0, rate=0.8, prospect_rate=0.8)
    assert not is_worth_probing(probe, 1.0, 12.9, 0.25)
    assert is_worth_probing(probe, 1.0, 13.1, 0.25)
    assert is_worth_probing(probe, 1.0, math.inf, 0.25)


def test_probe_fields_are_checked():
    with pytest.raises(ValueError, match="probe"):
        Probe(seconds=-1.0, rate=1.0, prospect_rate=1.0)


def _batch(remaining: int, num_waiting: int | None, finished=()) -> BatchView:
    views = [RequestView(i, 0, 30, remaining, 0, 0, 1) for i in range(8)]
    return BatchView(views, 8, num_waiting=num_waiting, finished_lengths=finished)


def test_horizon_of_a_drain_a_queue_and_an_engine_that_does_not_say():
    assert horizon_tokens(_batch(10, num_waiting=0)) == 80.0  # 8 requests, the last one 10 to go
    assert horizon_tokens(_batch(10, num_waiting=4)) == 80.0 + 4 * 40  # queued: a whole budget each
    finished = sorted([20] * 50 + [40] * MIN_OUTLIVING)  # each request outlived by 8 that went 10 more
    assert horizon_tokens(_batch(100, 4, finished)) == pytest.approx(80.0 + 4 * np.mean(finished))
    assert horizon_tokens(_batch(10, num_waiting=None)) == math.inf
    assert seconds_left(_batch(10, num_waiting=0), best_rate=40.0) == 2.0
