"""Trees of drafts: best-first cuts keep parents with their children, exact verification keeps the
deepest path of the target's tokens, and a node's ranked candidates start with the drafter's own draw
and, under the gumbel rule, hold the target's sample more often the more of them there are."""

from __future__ import annotations

import pytest
import torch

from specroll.drafting.draft_tree import GrownTree, TreeShape, accepted_path, grow_depth
from specroll.drafting.draws import draw_tokens, ranked_candidates
from specroll.drafting.protocol import DraftQuery
from specroll.noise import STREAM_SAMPLE, gumbels, uniforms
from specroll.sampling import sample_two_stage, top_candidates


def _tree() -> GrownTree:
    tree = GrownTree()
    a = tree.add(10, -1, 0.6)
    b = tree.add(11, -1, 0.3)
    tree.add(12, -1, 0.0)  # never kept
    c = tree.add(20, a, 0.5)
    tree.add(21, b, 0.25)
    tree.add(30, c, 0.45)
    return tree


def test_the_best_nodes_are_kept_in_growing_order_with_their_parents_renumbered():
    tokens, parents, scores = _tree().best(4)
    assert tokens == [10, 11, 20, 30] and parents == [-1, -1, 0, 2] and scores == [0.6, 0.3, 0.5, 0.45]
    assert _tree().best(2) == ([10, 20], [-1, 0], [0.6, 0.5])
    assert _tree().best(0) == ([], [], [])
    assert len(_tree().best(99)[0]) == 5  # the score-0 node is left out


def test_a_frontier_is_the_best_new_nodes_and_a_tree_shape_must_be_positive():
    tree = _tree()
    assert tree.frontier([0, 1, 2], 2) == [0, 1] and tree.frontier([2], 3) == []
    with pytest.raises(ValueError, match="depth, width and beam"):
        TreeShape(depth=0)


def test_growth_adds_every_candidate_and_expands_each_requests_beam_best_until_its_budget():
    """The draft head's growth, depth by depth, on literal candidates: ties go to the earlier node,
    a request stops growing at the depth of its budget, and the cut keeps growing order."""
    shape = TreeShape(depth=3, width=2, beam=1)
    a, b = DraftQuery(0, 0, [1], 1, 3), DraftQuery(1, 0, [1], 1, 1)
    trees = {0: GrownTree(), 1: GrownTree()}
    expanded = grow_depth(trees, [(a, -1), (b, -1)], [[5, 6], [7, 8]], [[0.5, 0.5], [0.9, 0.1]], shape, 0)
    assert expanded == [(a, 0, 0)]  # a's tie goes to its first candidate; b's budget of 1 stops it
    assert trees[1].token_ids == [7, 8] and trees[1].parents == [-1, -1]
    expanded = grow_depth(trees, [(a, 0)], [[9, 5]], [[0.8, 0.4]], shape, 1)
    assert expanded == [(a, 2, 0)]
    assert grow_depth(trees, [(a, 2)], [[1, 2]], [[1.0, 0.0]], shape, 2) == []  # as deep as a budget of 3
    assert trees[0].token_ids == [5, 6, 9, 5, 1, 2] and trees[0].parents == [-1, -1, 0, 0, 2, 2]
    assert trees[0].scores == [0.5, 0.5, 0.4, 0.2, 0.4, 0.0]
    assert trees[0].best(4) == ([5, 6, 9, 1], [-1, -1, 0, 2], [0.5, 0.5, 0.4, 0.4])
    assert trees[0].best(3) == ([5, 6, 9], [-1, -1, 0], [0.5, 0.5, 0.4])  # the tie: the earlier grown


def _queries(n: int) -> list[DraftQuery]:
    return [DraftQuery(i, 0, [1, 2, 3], 2, 4) for i in range(n)]


@pytest.mark.parametrize("rule", ["inverse-cdf", "gumbel"])
def test_the_first_candidate_is_the_draw_and_candidates_are_distinct(rule):
    torch.manual_seed(0)
    logits = torch.randn(64, 50) * 2
    queries = _queries(64)
    tokens, scores = ranked_candidates("coupled", logits, queries, 1, 3, 4, rule=rule)
    drawn, _ = draw_tokens("coupled", logits, queries, 1, 3, rule=rule)
    assert tokens[:, 0].tolist() == drawn
    assert all(len(set(row)) == 4 for row in tokens.tolist())
    assert ((scores >= 0) & (scores <= 1)).all()
    assert (scores[:, 0] >= scores[:, 1:].amax(-1)).float().mean() > 0.5  # mostly the first is best


def test_under_the_gumbel_rule_more_candidates_hold_the_targets_sample_more_often():
    """q is p perturbed: the target's own draw (same keyed noise) is the first candidate less often
    than it is among the first three."""
    torch.manual_seed(1)
    n = 2000
    p_logits = torch.randn(n, 50) * 2
    q_logits = p_logits + torch.randn(n, 50)
    queries = [DraftQuery(i, 0, [1, 2, 3], 2, 4) for i in range(n)]
    tokens, _ = ranked_candidates("coupled", q_logits, queries, 0, 7, 3, rule="gumbel")
    p = torch.softmax(p_logits, -1)
    top_ids, top_probs = top_candidates(p)
    ids, positions = torch.arange(n), torch.ones(n, dtype=torch.long)  # output position 1 = context 3 - 2 + 0
    target = sample_two_stage(
        p,
        top_ids,
        top_probs,
        uniforms(7, ids, positions, STREAM_SAMPLE),
        gumbels(7, ids[:, None], positions[:, None], top_ids),
    )
    first = (tokens[:, 0] == target).float().mean()
    among = (tokens == target[:, None]).any(-1).float().mean()
    assert 0.3 < first < among - 0.1, (first, among)


def test_exact_verification_of_a_forward_takes_the_deepest_matching_path():
    # context -> 10 -> 11 -> 13 ; context -> 10 -> 12 ; target: 10, then 12, then 99
    tokens, parents = [10, 11, 12, 13], [-1, 0, 0, 1]
    target_after = [10, 12, 99, 50, 77]  # after context, after node 0, 1, 2, 3
    assert accepted_path(tokens, parents, lambda node, _: target_after[node + 1]) == [0, 2]
    assert accepted_path(tokens, parents, lambda node, _: [4, 0, 0, 0, 0][node + 1]) == []
    twins = [5, 5, 7], [-1, -1, 0]  # equally deep paths: the one ending first in growing order
    assert accepted_path(*twins, lambda node, _: [5, 7, 7, 0][node + 1]) == [0, 2]
    assert accepted_path(*twins, lambda node, _: [5, 9, 9, 0][node + 1]) == [0]


def test_verification_keeps_the_longest_path_that_spells_the_targets_tokens():
    """A replayed response: the target's token after a node is the response's at the node's depth,
    through the same `accepted_path` as a forward's."""
    from specroll.drafting.protocol import Draft

    tree = Draft(0, [5, 6, 7, 8, 9], parents=[-1, -1, 0, 1, 3])  # 5 -> 7; 6 -> 8 -> 9
    assert tree.kept_in_exact_mode([6, 8, 9, 1]) == 3
    assert (
        tree.kept_in_exact_mode([5, 7]) == 2
        and tree.kept_in_exact_mode([5, 8]) == 1
        and tree.kept_in_exact_mode([4]) == 0
    )
    twins = Draft(0, [5, 5, 7], parents=[-1, -1, 1])  # the same token twice: the deeper match counts
    assert twins.kept_in_exact_mode([5, 7]) == 2
    assert Draft(0, [1, 2, 3]).kept_in_exact_mode([1, 2, 4]) == 2  # a chain
