import pytest

from specroll.policies.base import BatchView, RequestView
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
    policy = LadderPolicy(LADDER, active="prompt-lookup")
    assert policy.drafter_choice(batch_of(1)) == "draft-model"
    assert policy.drafter_choice(batch_of(200)) is None
    assert policy.draft_lengths(batch_of(200)) == [0] * 200


def test_unknown_active_rung_is_refused():
    with pytest.raises(ValueError, match="no rung named 'eagle'"):
        LadderPolicy(LADDER, active="eagle")
