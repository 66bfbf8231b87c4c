"""Step-time calibration: literal averages, buckets, fallbacks; auto follows measured times."""

from __future__ import annotations

import pytest

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, RequestView, ForwardStats
from specroll.policies.calibration import ForwardTimeCalibration, batch_bucket
from specroll.policies.cost_model import CostModel


def test_buckets_are_powers_of_two():
    assert [batch_bucket(b) for b in (1, 2, 3, 4, 7, 8, 255, 256)] == [0, 1, 1, 2, 2, 3, 7, 8]


def test_median_of_recent_ratios_and_fallbacks():
    calibration = ForwardTimeCalibration(window=4, min_samples=3)
    assert calibration.scale(32, 2) == 1.0  # nothing measured: the profile's word
    for measured in (2.0, 30.0):  # a spike among them
        calibration.record(32, 2, predicted_seconds=1.0, measured_seconds=measured)
    assert calibration.scale(32, 2) == 1.0  # too few samples yet
    calibration.record(40, 2, predicted_seconds=1.0, measured_seconds=3.0)  # same bucket (32..63)
    assert calibration.scale(32, 2) == pytest.approx(3.0)  # the median ignores the spike
    assert calibration.scale(32, 1) == pytest.approx(3.0)  # another draft cap borrows the drafts'
    assert calibration.scale(32, 0) == pytest.approx(3.0)  # plain, unmeasured, borrows too
    for measured in (1.5, 1.5, 1.5):
        calibration.record(32, 0, predicted_seconds=1.0, measured_seconds=measured)
    assert calibration.scale(32, 0) == pytest.approx(1.5)
    assert calibration.scale(64, 2) == 1.0  # another bucket borrows nothing
    for measured in (4.0, 4.0, 4.0):  # the window keeps the last 4: 3, 4, 4, 4
        calibration.record(32, 2, predicted_seconds=1.0, measured_seconds=measured)
    assert calibration.scale(32, 2) == pytest.approx(4.0)


def test_samples_needed_counts_down_to_a_measured_cap():
    calibration = ForwardTimeCalibration(window=4, min_samples=3)
    assert calibration.samples_needed(32, 2) == 3
    calibration.record(40, 2, predicted_seconds=1.0, measured_seconds=2.0)  # same bucket (32..63)
    assert calibration.samples_needed(32, 2) == 2 and calibration.samples_needed(32, 2, tree=True) == 3
    for _ in range(4):
        calibration.record(32, 2, predicted_seconds=1.0, measured_seconds=2.0)
    assert calibration.samples_needed(32, 2) == 0 and calibration.is_measured_cap(32, 2)


def batch(num_drafted: int, num_accepted: int, size: int = 32) -> BatchView:
    return BatchView([RequestView(i, 0, 50, 400, num_drafted, num_accepted, 10, 100) for i in range(size)], 8)


def test_auto_stops_drafting_when_drafting_steps_measure_slower_than_predicted():
    # the profile says width is nearly free, so auto drafts; the steps then measure 10x slower
    model = CostModel(c_base=1e-3, c_tok=1e-6)
    policy = AutoPolicy(model, warmup_trials=0, probe_every=4)
    drafted = accepted = 0
    caps = []
    for _ in range(200):
        lengths = policy.decide(batch(drafted, accepted)).draft_lengths
        cap = max(lengths)
        caps.append(cap)
        drafted, accepted = drafted + cap, accepted + cap // 2  # half of every draft accepted
        seconds = model.step_seconds(32, cap, 100) * (10.0 if cap else 1.0)
        policy.observe(ForwardStats(32, 32 * cap, 16 * cap, 32, seconds, 0.0))
    assert caps[0] > policy.probe_length and max(caps[-100:]) <= policy.probe_length  # plain, bar probes


def test_auto_measures_plain_steps_while_it_drafts():
    model = CostModel(c_base=1e-3, c_tok=1e-6)  # drafting always pays, so auto always drafts
    policy = AutoPolicy(model, warmup_trials=0, probe_every=4)
    caps = []
    for _ in range(200):
        cap = max(policy.decide(batch(0, 0)).draft_lengths)
        caps.append(cap)
        policy.observe(ForwardStats(32, 32 * cap, 0, 32, model.step_seconds(32, cap, 100), 0.0))
    plain_steps = [i for i, cap in enumerate(caps) if cap == 0]
    assert len(plain_steps) == 3  # until three plain steps are measured, then never again
    assert policy.calibration.is_measured(32, is_drafting=False)


def test_auto_measures_plain_as_soon_as_drafting_is_measured_and_stops_drafting_at_a_loss():
    """A profile from another machine prices width at next to nothing; here a drafting forward costs
    1.3x a plain one, and every row accepts one draft token one forward in four (alpha 0.2: under 1.25
    tokens a forward, a loss). Once the bucket's drafting forwards are measured, the next forwards
    decode plain until plain is measured too (not one probe step in `probe_every`), and drafting then
    stops, bar probes."""
    model = CostModel(c_base=1e-3, c_tok=1e-6)
    policy = AutoPolicy(model, warmup_trials=0, probe_every=16, seed=3)
    drafted = accepted = 0
    caps = []
    for i in range(120):
        cap = max(policy.decide(batch(drafted, accepted)).draft_lengths)
        caps.append(cap)
        hits = 1 if cap and i % 4 == 0 else 0
        drafted, accepted = drafted + cap, accepted + hits
        policy.observe(ForwardStats(32, 32 * cap, 32 * hits, 32, 1.3 if cap else 1.0, 0.0))
    first_plain = caps.index(0)
    assert first_plain <= 8  # right after a drafting cap was measured (three forwards at one cap)
    assert caps[first_plain : first_plain + 3] == [0, 0, 0]
    assert sum(1 for cap in caps[40:] if cap) <= 80 // 8  # plain, bar probes
