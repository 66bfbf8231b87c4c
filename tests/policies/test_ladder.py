import pytest

from specroll.policies.base import BatchView, DraftDecision, ForwardStats, RequestView
from specroll.policies.cost_model import Affine, CostModel
from specroll.policies.ladder import DraftLadder, LadderPolicy, Rung

TARGET = CostModel(c_base=1.0, c_tok=0.1)
LOOKUP = Rung("prompt-lookup", 0.3)
DRAFT = Rung("draft-model", 0.8, Affine(0.1, 0.0))
LADDER = DraftLadder((LOOKUP, DRAFT), TARGET)


def batch_of(size, drafted=0, accepted=0):
    return BatchView([RequestView(i, 0, 10, 100, drafted, accepted, 1) for i in range(size)], max_draft=4)


def test_evaluate_literal():
    choice = LADDER.evaluate(LOOKUP, 0.3, batch_size=1, max_draft=1)
    # k=1: 1.3 tokens in 1.2 s against 1 token in 1.1 s
    assert choice.k == 1 and choice.speedup == pytest.approx(1.3 * 1.1 / 1.2)


def test_fastest_rung_at_the_batch_acceptance():
    assert LADDER.choose(1, 4).rung.name == "draft-model"
    # if prompt lookup accepted as well as the draft model, drafting for free would win
    assert LADDER.choose(1, 4, {"prompt-lookup": 0.8}).rung.name == "prompt-lookup"


def test_policy_names_the_drafter_and_turns_off_at_large_batches():
    policy = LadderPolicy(LADDER, probe_every=10**9)
    decision = policy.decide(batch_of(1))
    assert decision.drafter == "draft-model" and decision.draft_lengths[0] > 0
    assert policy.decide(batch_of(200)) == DraftDecision.uniform(0, 200)


def test_a_rung_is_judged_only_on_the_forwards_it_drafted():
    policy = LadderPolicy(LADDER, probe_every=10**9)
    policy.observe(
        ForwardStats(4, 16, 0, 4, 1.0, 0.1, drafted=(4,) * 4, accepted=(0,) * 4, drafter="draft-model")
    )
    assert policy.alpha("draft-model") < DRAFT.alpha
    assert policy.alpha("prompt-lookup") == LOOKUP.alpha


def test_a_poor_ladder_probes_the_rung_tried_least_recently():
    ladder = DraftLadder((Rung("a", 0.1), Rung("b", 0.1)), TARGET)
    policy = LadderPolicy(ladder, probe_every=1, probe_length=2)
    assert [policy.decide(batch_of(2)) for _ in range(3)] == [
        DraftDecision.uniform(2, 2, "a"),
        DraftDecision.uniform(2, 2, "b"),
        DraftDecision.uniform(2, 2, "a"),
    ]


def test_a_probe_that_accepts_makes_the_rung_chosen():
    ladder = DraftLadder((Rung("a", 0.1), Rung("b", 0.1)), TARGET)
    policy = LadderPolicy(ladder, probe_every=1)
    probe = policy.decide(batch_of(2))
    for _ in range(3):
        policy.observe(
            ForwardStats(2, 4, 4, 6, 1.0, 0.0, drafted=(2, 2), accepted=(2, 2), drafter=probe.drafter)
        )
    decision = policy.decide(batch_of(2))
    assert decision.drafter == probe.drafter and decision.draft_lengths[0] > 0


def test_bad_probe_settings_are_refused():
    with pytest.raises(ValueError, match="probe_every"):
        LadderPolicy(LADDER, probe_every=0)
