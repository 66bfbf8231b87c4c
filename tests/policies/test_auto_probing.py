"""auto probes when its model says plain decoding wins, so unknown acceptance gets measured."""

from __future__ import annotations

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel

COMPUTE_BOUND = CostModel(c_base=0.0, c_tok=1e-3)  # every token costs the same: drafting never pays


def batch(drafted: int, accepted: int) -> BatchView:
    return BatchView([RequestView(i, 0, 10, 100, drafted, accepted, 1, 20) for i in range(4)], max_draft=8)


def probe_steps(policy: AutoPolicy, num_steps: int) -> list[int]:
    drafted, probes = 0, []
    for step in range(1, num_steps + 1):
        lengths = policy.decide(batch(drafted, 0)).draft_lengths
        if any(lengths):
            probes.append(step)
            drafted += lengths[0]  # every draft rejected at its first token: one trial per request
    return probes


def test_probes_during_warmup_then_about_one_step_in_probe_every():
    policy = AutoPolicy(
        COMPUTE_BOUND, warmup_trials=8, probe_every=4, probe_length=2, max_probe_overhead=10.0
    )
    probes = probe_steps(policy, 2000)
    assert probes[:2] == [1, 2]  # warm-up: 4 trials a step, 8 in all
    assert 400 < len(probes[2:]) < 600  # then 1 in 4 of the remaining 1998 steps


def test_probes_are_rarer_where_they_cost_more():
    # a probe of 2 tokens costs 3 plain forwards here: at most 1 % overhead allows 1 probe in 200
    policy = AutoPolicy(
        COMPUTE_BOUND, warmup_trials=8, probe_every=4, probe_length=2, max_probe_overhead=0.01
    )
    probes = probe_steps(policy, 4000)[2:]
    assert 8 < len(probes) < 40  # about 20 of 3998 steps
    cheap = CostModel(c_base=1e-3, c_tok=1e-6)  # a probe costs 1.008 plain forwards: 1 in probe_every
    assert (
        150 < len(probe_steps(AutoPolicy(cheap, warmup_trials=8, probe_every=4, probe_length=2), 800)) < 250
    )


def test_probes_land_on_every_phase_of_a_periodic_output():
    # a fixed probe period resonates with periodic outputs (lines of 8 tokens moving in step)
    probes = probe_steps(
        AutoPolicy(COMPUTE_BOUND, warmup_trials=8, probe_every=16, probe_length=2, max_probe_overhead=10.0),
        800,
    )
    assert {step % 8 for step in probes[2:]} == set(range(8))


def test_probing_is_seeded():
    def run(seed: int) -> list[int]:
        return probe_steps(
            AutoPolicy(COMPUTE_BOUND, warmup_trials=8, probe_every=4, seed=seed, max_probe_overhead=10.0), 200
        )

    assert run(0) == run(0) != run(1)


def test_no_probe_when_speculation_already_chosen():
    free_drafts = CostModel(c_base=1e-3, c_tok=0.0)  # width is free: draft the most
    policy = AutoPolicy(free_drafts)
    assert policy.decide(batch(0, 0)).draft_lengths == (8, 8, 8, 8)


def test_measured_probe_time_holds_probing_to_its_share_of_plain_time():
    from specroll.policies.base import ForwardStats

    cheap = CostModel(c_base=1e-3, c_tok=1e-6)  # the model thinks a probe costs 1.008 plain forwards
    policy = AutoPolicy(cheap, warmup_trials=8, probe_every=4, probe_length=2, max_probe_overhead=0.01)
    drafted, late_probes = 0, 0
    for step in range(4000):
        lengths = policy.decide(batch(drafted, 0)).draft_lengths
        late_probes += step >= 200 and any(lengths)  # by then every draft was rejected: only probes draft
        drafted += lengths[0]
        policy.observe(
            ForwardStats(
                batch_size=4,
                num_drafted=sum(lengths),
                num_accepted=0,
                num_emitted=4,
                forward_seconds=0.003 if any(lengths) else 0.001,  # a probe: 3 plain forwards
                draft_seconds=0.0,
            )
        )
    assert (
        10 <= late_probes <= 25
    )  # 1 % of ~3.8 s of plain forwards is ~19 probes' 2 ms; the model alone: ~950


def test_measures_the_next_cap_up_where_the_profile_overprices_width():
    """The profile says each draft token costs a fifth of a plain forward; measured, width is free.
    An unmeasured cap borrows the measured caps' correction, which keeps the profile's shape, so only
    measuring the next cap up lets auto climb to the longest draft that pays."""
    from specroll.policies.base import ForwardStats

    overpriced = CostModel(c_base=1e-3, c_tok=5e-5)  # at batch 4: +20 % per draft token
    policy = AutoPolicy(overpriced, warmup_trials=8, probe_every=4, max_probe_overhead=10.0)
    drafted = accepted = 0
    caps = []
    for _ in range(600):
        views = [RequestView(i, 0, 10, 100, drafted, accepted, 1, 20) for i in range(4)]
        lengths = policy.decide(BatchView(views, max_draft=8)).draft_lengths
        caps.append(max(lengths))
        drafted += lengths[0]
        accepted += round(0.6 * lengths[0])  # alpha 0.6
        policy.observe(ForwardStats(4, sum(lengths), 0, 4, forward_seconds=1e-3, draft_seconds=0.0))
    first = next(c for c in caps[10:] if c)  # the profile's choice
    assert first <= 2
    assert max(caps[-100:], key=caps[-100:].count) == 8  # measured: the longest draft pays
    assert 7 in caps[-300:]  # and the cap below stays measured


def test_a_new_target_is_measured_again_from_a_shorter_warm_up():
    """After an RL step the target (and an online drafter) has new weights: acceptance is measured
    again, but from what the old target accepted (carried as a prior of `carried_trials` trials), so
    the warm-up runs only for the trials that prior does not cover; forward times still hold."""

    def views(first_id: int, drafted: int) -> BatchView:
        return BatchView([RequestView(first_id + i, 0, 10, 100, drafted, 0, 1, 20) for i in range(4)], 8)

    def probing_forwards(policy: AutoPolicy, first_id: int) -> int:
        drafted, probes = 0, 0
        for _ in range(40):  # every draft rejected: a warm-up, then plain decoding
            k = policy.decide(views(first_id, drafted)).draft_lengths[0]
            drafted, probes = drafted + k, probes + (k > 0)
        assert not any(policy.decide(views(first_id, drafted)).draft_lengths)
        return probes

    policy = AutoPolicy(COMPUTE_BOUND, warmup_trials=48, probe_every=10_000, max_probe_overhead=10.0)
    first = probing_forwards(policy, 0)
    calibration = policy.calibration
    policy.new_target()
    again = probing_forwards(policy, 100)  # the next step's requests
    assert 0 < again < first  # a warm-up again, for the 48 - 32 trials the carried prior leaves
    assert policy.calibration is calibration
