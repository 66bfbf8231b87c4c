import pytest

from specroll.policies.base import BatchView, RequestView, SpeculationPolicy
from specroll.policies.cost_model import CostModel
from specroll.policies.policy_names import known_policies, make_policy

NAMES = ["none", "fixed-3", "threshold", "das", "bandit", "ladder", "auto"]


def test_known_policies():
    assert known_policies() == ["auto", "bandit", "das", "fixed-K", "ladder", "none", "threshold"]


@pytest.mark.parametrize("name", NAMES)
def test_every_policy_answers_one_length_per_request(name):
    policy = make_policy(name)
    assert isinstance(policy, SpeculationPolicy) and policy.name == name
    batch = BatchView([RequestView(i, 0, 10, 100, 0, 0, 0) for i in range(3)], max_draft=4)
    lengths = policy.decide(batch).draft_lengths
    assert len(lengths) == 3 and all(0 <= k <= 4 for k in lengths)


def test_a_given_cost_model_is_used():
    free_tokens = CostModel(c_base=1.0, c_tok=0.0)
    assert make_policy("threshold", free_tokens).threshold == 1024
    assert make_policy("threshold", CostModel(c_base=0.0, c_tok=1.0)).threshold == 0


def test_unknown_name():
    with pytest.raises(ValueError, match="known policies"):
        make_policy("eagle")
