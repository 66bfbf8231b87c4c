"""auto probes when its model says plain decoding wins, so unknown acceptance gets measured."""

from __future__ import annotations

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel

COMPUTE_BOUND = CostModel(c_base=0.0, c_tok=1e-3)  # every token costs the same: drafting never pays


def batch(drafted: int, accepted: int) -> BatchView:
    return BatchView([RequestView(i, 0, 10, 100, drafted, accepted, 1, 20) for i in range(4)], max_draft=8)


def test_probes_during_warmup_then_only_periodically():
    policy = AutoPolicy(COMPUTE_BOUND, warmup_trials=8, probe_every=4, probe_length=2)
    drafted, probes = 0, []
    for step in range(1, 11):
        lengths = policy.draft_lengths(batch(drafted, 0))
        if any(lengths):
            probes.append(step)
            drafted += lengths[0]  # every draft rejected at its first token: one trial per request
    # warm-up: steps 1 and 2 (4 trials each, 8 in all), then every 4th step
    assert probes == [1, 2, 4, 8]


def test_no_probe_when_speculation_already_chosen():
    free_drafts = CostModel(c_base=1e-3, c_tok=0.0)  # width is free: draft the most
    policy = AutoPolicy(free_drafts)
    assert policy.draft_lengths(batch(0, 0)) == [8, 8, 8, 8]
