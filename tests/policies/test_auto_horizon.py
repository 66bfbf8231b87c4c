"""`auto` prices its exploration against the work left: a batch about to finish does not spend its
last forwards on probes it could not repay; with work behind it (long budgets, a queue) it explores
as it always has."""

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel

COMPUTE_BOUND = CostModel(c_base=0.0, c_tok=1e-3)  # a probe of 2 drafts costs 3 plain forwards
# at batch 8 a two-token chain is best; a tree of 4 nodes, unmeasured, is predicted at 0.86 of it
TREE_HOPEFUL = CostModel(c_base=1e-3, c_tok=5e-5)


def _batch(remaining: int, num_waiting: int | None = 0, trees: bool = False) -> BatchView:
    """8 fresh requests (nothing drafted yet) with `remaining` tokens of budget left each."""
    views = [RequestView(i, 0, 40, remaining, 0, 0, 1, 100) for i in range(8)]
    return BatchView(views, max_draft=16, trees=trees, num_waiting=num_waiting)


def test_no_warm_up_probe_where_the_batch_has_ten_tokens_left():
    # warming up takes 8 probe forwards of 3 plain ones each; the batch has ~10 plain forwards left
    assert not any(AutoPolicy(COMPUTE_BOUND).decide(_batch(10)).draft_lengths)


def test_a_warm_up_probe_where_the_batch_has_two_thousand_tokens_left():
    assert AutoPolicy(COMPUTE_BOUND).decide(_batch(2000)).draft_lengths == (2,) * 8


def test_a_queue_lengthens_the_horizon_of_a_batch_near_its_end():
    # 256 queued requests of ~50 tokens: ~1,600 forwards to repay the warm-up's ~8 forwards' loss
    assert AutoPolicy(COMPUTE_BOUND).decide(_batch(10, num_waiting=256)).draft_lengths == (2,) * 8


def test_an_engine_that_does_not_say_its_queue_explores_as_without_a_horizon():
    assert AutoPolicy(COMPUTE_BOUND).decide(_batch(10, num_waiting=None)).draft_lengths == (2,) * 8


def test_no_tree_probe_where_the_batch_has_ten_tokens_left():
    decision = AutoPolicy(TREE_HOPEFUL).decide(_batch(10, trees=True))
    assert decision.shape == "chain-2"  # the plan itself, not an unmeasured tree


def test_an_unmeasured_tree_is_probed_where_the_batch_has_two_thousand_tokens_left():
    # past the chains' warm-up: a tree forward here costs 2.1 plain ones, so it waits for that first
    assert AutoPolicy(TREE_HOPEFUL, warmup_trials=0).decide(_batch(2000, trees=True)).shape == "tree-4"
    policy = AutoPolicy(TREE_HOPEFUL, warmup_trials=0)
    assert policy.decide(_batch(10, num_waiting=64, trees=True)).shape == "tree-4"


def test_a_dear_tree_waits_for_the_chains_warm_up():
    """Its first estimate is the chains' alpha, measured on forwards of half its price."""
    assert AutoPolicy(TREE_HOPEFUL).decide(_batch(2000, trees=True)).shape == "chain-2"
    cheap_width = CostModel(c_base=1e-3, c_tok=1e-6)  # a tree forward as dear as a plain one
    assert AutoPolicy(cheap_width).decide(_batch(2000, trees=True)).tree


def test_a_short_drain_decodes_as_planned_forward_after_forward():
    """Ten forwards of a batch draining its last ten tokens: every one runs the plan (a two-token
    chain), none probes a tree; with two thousand tokens left the first forwards measure the trees."""

    def shapes(remaining: int) -> list[str]:
        policy, drafted, out = AutoPolicy(TREE_HOPEFUL, warmup_trials=0), 0, []
        for step in range(10):
            views = [
                RequestView(i, 0, 40 + step, remaining - step, drafted, 0, 1 + step, 100) for i in range(8)
            ]
            decision = policy.decide(BatchView(views, max_draft=16, trees=True, num_waiting=0))
            out.append(decision.shape)
            drafted += 0 if decision.tree else decision.draft_lengths[0]
        return out

    assert not any(s.startswith("tree") for s in shapes(10))
    assert shapes(2000)[0] == "tree-4"
