from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.threshold import BatchThreshold, solve_threshold

# t = 1 + 0.1 * b * n. k = 1 at alpha = 0.5 emits 1.5 tokens; speedup = 1.5 (1 + 0.1 b) / (1 + 0.2 b),
# above 1 iff b < 10.
MODEL = CostModel(c_base=1.0, c_tok=0.1)


def batch_of(size):
    return BatchView([RequestView(i, 0, 0, 100, 0, 0, 0) for i in range(size)], max_draft=8)


def test_solver_finds_the_crossover_by_hand():
    assert solve_threshold(MODEL, k=1, alpha=0.5, max_batch_size=64) == 9
    assert solve_threshold(MODEL, k=1, alpha=0.0, max_batch_size=64) == 0


def test_policy_switches_where_the_model_says():
    policy = BatchThreshold.from_cost_model(MODEL, k=1, alpha=0.5)
    assert policy.decide(batch_of(9)).draft_lengths == (1,) * 9
    assert policy.decide(batch_of(10)).draft_lengths == (0,) * 10


def test_tlt_elastic_default_threshold():
    policy = BatchThreshold()
    assert policy.decide(batch_of(32)).draft_lengths == (4,) * 32
    assert policy.decide(batch_of(33)).draft_lengths == (0,) * 33
