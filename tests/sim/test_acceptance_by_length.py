"""Acceptance that may depend on a request's length (`DrafterProfile.length_slope`, issue 38)."""

import numpy as np

from specroll.sim.acceptance_rates import AcceptanceModel, DrafterProfile
from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, simulate

SHARE = np.random.default_rng(1).uniform(0.05, 1.0, size=20_000)  # output length / budget


def _draw(slope):
    model = AcceptanceModel((DrafterProfile("d", 0.65, 6.0, length_slope=slope),))
    return model.sample(len(SHARE), np.random.default_rng(0), SHARE)[0]


def test_no_slope_draws_exactly_what_it_drew_before():
    plain = AcceptanceModel((DrafterProfile("d", 0.65, 6.0),)).sample(len(SHARE), np.random.default_rng(0))
    assert np.array_equal(_draw(0.0), plain[0])


def test_long_requests_draft_worse_at_the_same_mean():
    rates = _draw(-0.3)
    assert np.corrcoef(SHARE, rates)[0, 1] < -0.2
    assert abs(rates.mean() - 0.65) < 0.01
    assert rates.min() >= 0.01 and rates.max() <= 0.99


def test_stragglers_that_draft_worse_slow_speculation_down():
    preset = get_preset("DAPO-32B-20K").with_overrides(num_gpus=16, num_prompts=16, group_size=8, seed=1)
    worse = preset.acceptance.drafters[0].__class__(
        **{**preset.acceptance.drafters[0].__dict__, "length_slope": -0.4}
    )
    sloped = preset.with_overrides(acceptance=AcceptanceModel((worse, *preset.acceptance.drafters[1:])))
    flat_s = simulate(preset, SYSTEMS["vanilla-spec"])[0].makespan_seconds
    sloped_s = simulate(sloped, SYSTEMS["vanilla-spec"])[0].makespan_seconds
    assert sloped_s > flat_s
