"""Plain decoding held unpriced: the rule alone, then `auto` pricing only where something moved."""

from __future__ import annotations

import pytest

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, ForwardStats, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.plain_hold import PlainHold

# width costs its size: drafting never pays once acceptance is measured low
WIDTH_COSTS = CostModel(c_base=1e-4, c_tok=1e-3)


def test_hold_needs_a_start_the_same_requests_and_no_probe_step():
    hold = PlainHold(max_forwards=3)
    assert not hold.holds([1, 2], is_probe_step=False)  # nothing priced yet
    hold.start([1, 2])
    assert hold.holds([1, 2], is_probe_step=False)
    assert not hold.holds([1, 2], is_probe_step=True)
    assert not hold.holds([1, 3], is_probe_step=False)  # a request finished, another joined
    assert not hold.holds([1], is_probe_step=False)
    assert hold.holds([1, 2], is_probe_step=False) and hold.holds([1, 2], is_probe_step=False)
    assert not hold.holds([1, 2], is_probe_step=False)  # three held: priced again
    hold.start([1, 2])
    hold.end()
    assert not hold.holds([1, 2], is_probe_step=False)


def test_hold_refuses_a_negative_length():
    with pytest.raises(ValueError, match="max_forwards"):
        PlainHold(max_forwards=-1)


def batch(num_output: int, size: int = 8, drafted: int = 40, accepted: int = 0) -> BatchView:
    views = [RequestView(i, 0, num_output, 400, drafted, accepted, 20, 100 + num_output) for i in range(size)]
    return BatchView(views, 4, num_waiting=4)


class CountingAuto(AutoPolicy):
    """`auto` counting the forwards it priced."""

    priced: int = 0

    def _candidates(self, view):
        self.priced += 1
        return super()._candidates(view)


def run(policy: CountingAuto, forwards: int, drafted_at: set[int] = frozenset()) -> list[int]:
    caps = []
    for step in range(forwards):
        caps.append(max(policy.decide(batch(10 + step)).draft_lengths))
        num_drafted = 8 if step in drafted_at else 0
        policy.observe(ForwardStats(8, num_drafted, 0, 8, WIDTH_COSTS.step_seconds(8, 0, 100), 0.0))
    return caps


def settled(hold: PlainHold) -> CountingAuto:
    """`auto` past its warm-up on a drafter that is never accepted: it decodes plain."""
    return CountingAuto(WIDTH_COSTS, warmup_trials=0, probe_every=1_000_000, hold=hold)


def test_auto_prices_one_forward_in_nine_while_it_decodes_plain():
    held, every = settled(PlainHold(max_forwards=8)), settled(PlainHold(max_forwards=0))
    assert run(held, 90) == run(every, 90) == [0] * 90  # the same choices
    assert every.priced == 90
    assert held.priced == 10  # one priced forward, then eight held, ten times


def test_a_drafting_forward_ends_the_hold():
    policy = settled(PlainHold(max_forwards=8))
    run(policy, 18, drafted_at={3})  # a forward drafted (a probe elsewhere, say): the next is priced
    assert policy.priced == 3  # forwards 0, 4 and 13


def test_a_new_target_ends_the_hold():
    policy = settled(PlainHold(max_forwards=8))
    run(policy, 2)
    policy.new_target()
    run(policy, 1)
    assert policy.priced == 2


def test_a_warm_up_whose_probes_do_not_pay_holds_plain_too():
    """Before any draft is measured, a probe priced not to pay over the work left (a few tokens to go)
    pays less a forward later: the warm-up holds plain like any plain decision, where it once priced
    every forward (a rollout that never drafts priced all of them)."""

    def run_warming(policy: CountingAuto, forwards: int) -> list[int]:
        caps = []
        for step in range(forwards):
            views = [RequestView(i, 0, 10 + step, 30 - step, 0, 0, step, 100 + step) for i in range(8)]
            caps.append(max(policy.decide(BatchView(views, 4, num_waiting=0)).draft_lengths))
            policy.observe(ForwardStats(8, 0, 0, 8, WIDTH_COSTS.step_seconds(8, 0, 100), 0.0))
        return caps

    def warming(hold: PlainHold) -> CountingAuto:
        return CountingAuto(WIDTH_COSTS, warmup_trials=64, probe_every=1_000_000, hold=hold)

    held, every = warming(PlainHold(max_forwards=8)), warming(PlainHold(max_forwards=0))
    assert run_warming(held, 18) == run_warming(every, 18) == [0] * 18  # no probe pays: the same choices
    assert held.tracker.pooled_trials < held.warmup_trials  # still warming up
    assert every.priced == 18
    assert held.priced == 2  # forwards 0 and 9
