"""SpecActor Algorithm 2 at every segment, at the worker's current batch (issue 38)."""

import numpy as np
import pytest

from specroll.scheduling.decoupled_plan import best_request_plan, coupled_tgs, decoupled_tgs
from specroll.sim.presets import get_preset
from specroll.sim.speculation import RunningBatch
from specroll.sim.systems import SYSTEMS, _spec_costs, _topology, make_strategy

PRESET = get_preset("DAPO-32B-20K")


def _strategy(system="specactor"):
    topology = _topology(PRESET, SYSTEMS[system])
    return make_strategy(PRESET, topology, _spec_costs(PRESET, topology), SYSTEMS[system], None)


def _batch(acceptance):
    b = len(acceptance)
    return RunningBatch(
        worker=0,
        request_ids=np.arange(b),
        group_ids=np.arange(b),
        drafters=np.zeros(b, dtype=np.int64),
        acceptance=np.asarray(acceptance, dtype=np.float64),
        positions=np.full(b, 5000.0),
        finished_siblings=np.zeros(b, dtype=np.int64),
        max_tokens=PRESET.lengths.max_tokens,
        prompt_tokens=PRESET.prompt_tokens,
    )


def _slow_best_request_plan(p, batch, max_window, draft, verify_by_window):
    """The loop the paper writes: every window, coupled then decoupled, the first best kept."""
    best, best_tgs = None, -1.0
    for window in range(1, max_window + 1):
        for is_coupled, model in ((True, coupled_tgs), (False, decoupled_tgs)):
            tgs = model(p, window, batch, draft, verify_by_window(window))
            if tgs > best_tgs:
                best, best_tgs = (window, is_coupled), tgs
    return best


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.65, 0.8, 0.95])
@pytest.mark.parametrize("batch", [1, 8, 256])
def test_the_vectorised_choice_is_the_papers_loop(p, batch):
    draft = lambda b: 0.004 + 0.0001 * b
    verify = lambda w: lambda b: 0.013 + 0.0004 * b * (w + 1)
    plan = best_request_plan(p, batch, 16, draft, verify)
    assert (plan.window, plan.is_coupled) == _slow_best_request_plan(p, batch, 16, draft, verify)


def test_a_lone_straggler_is_reconfigured_past_the_initial_window():
    """At batch 1 a request is its own mean: it was skipped, and held to Algorithm 1's window (2)."""
    strategy = _strategy()
    assert strategy.plan.window == 2
    plan = strategy.decide(_batch([0.8]))
    assert plan.draft_len[0] > strategy.plan.window
    assert plan.tokens_per_iter[0] > 2.0  # the old cap: at most 2 tokens a round


def test_the_window_follows_the_batch_as_it_shrinks():
    strategy = _strategy()
    large = strategy.decide(_batch(np.full(256, 0.65)))
    small = strategy.decide(_batch(np.full(4, 0.65)))
    assert small.draft_len.max() > large.draft_len.max()


def test_requests_below_the_mean_get_their_own_plan():
    strategy = _strategy()
    plan = strategy.decide(_batch([0.2, 0.9, 0.9, 0.9]))
    assert plan.draft_len[0] < plan.draft_len[1]  # a poor drafter wastes less with a short window


def test_without_reconfiguration_every_request_keeps_the_plan_window():
    strategy = _strategy("decoupled")
    plan = strategy.decide(_batch([0.2, 0.9]))
    assert (plan.draft_len == strategy.plan.window).all()
