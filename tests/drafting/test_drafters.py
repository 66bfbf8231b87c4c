"""Own-context, grouped, history and combined drafters: literal drafts through the protocol."""

import pytest

from specroll.drafting.combined import CombinedDrafter
from specroll.drafting.grouped import GroupedDrafter
from specroll.drafting.history import HistoryDrafter
from specroll.drafting.own_context import OwnContextDrafter
from specroll.drafting.protocol import BaseDrafter, Draft, Drafter, DraftQuery, RequestInfo
from specroll.drafting.suffix_draft import DraftShape


FREQUENCIES = DraftShape(short_match_discount=0)  # scores are the continuation frequencies alone


def query(request_id, context=(), group_id=0, budget=4):
    return DraftQuery(request_id, group_id, list(context), 0, budget)


def draft_of(drafter, request_id, group_id=0, budget=4):
    return drafter.propose([query(request_id, group_id=group_id, budget=budget)])[0]


def feed(drafter, request_id, group_id, tokens, step=0):
    drafter.begin(RequestInfo(request_id, group_id, (), step))
    drafter.observe(request_id, tokens)
    drafter.finish(request_id)


@pytest.mark.parametrize("cls", [OwnContextDrafter, GroupedDrafter, HistoryDrafter])
def test_drafters_follow_the_protocol(cls):
    """Every member the contract names, with the contract's kinds: a drafter missing one, or with a
    member of the wrong kind, fails here (`isinstance` on a runtime protocol checks names only)."""
    drafter = cls()
    assert isinstance(drafter, Drafter)
    for name in ("begin", "propose", "observe", "observe_features", "finish", "advance_step", "member",
                 "draft_cost"):  # fmt: skip
        assert callable(getattr(drafter, name)), name
    assert isinstance(drafter.name, str) and isinstance(drafter.needs_features, bool)
    assert isinstance(drafter.feature_layers, tuple) and isinstance(drafter.member_names, frozenset)
    assert drafter.member(None) is drafter and drafter.draft_cost() is None


def test_the_protocol_check_fails_for_a_drafter_missing_a_member():
    class NoFeatures(BaseDrafter):
        needs_features = None  # not a bool

    with pytest.raises(AssertionError):
        test_drafters_follow_the_protocol(NoFeatures)


def test_own_context_drafts_from_prompt_and_output():
    drafter = OwnContextDrafter(FREQUENCIES)
    drafter.begin(RequestInfo(1, 0, (5, 6, 7, 8)))
    drafter.observe(1, [9, 5, 6])
    draft = draft_of(drafter, 1)
    assert draft.token_ids == [7, 8, 9, 5]
    assert draft.parents is None
    assert draft.scores == [1.0, 1.0, 1.0, 1.0]


def test_own_context_tree_draft():
    drafter = OwnContextDrafter(DraftShape(max_tree_tokens=3, short_match_discount=0))
    drafter.begin(RequestInfo(1, 0, (1, 2, 1, 3, 1)))
    draft = draft_of(drafter, 1, budget=2)
    assert draft.token_ids == [2, 3, 1]  # equal paths: the one indexed first is expanded first
    assert draft.parents == [-1, -1, 0]
    assert draft.scores == [0.5, 0.5, 0.5]


def test_own_context_forgets_finished_requests():
    drafter = OwnContextDrafter()
    drafter.begin(RequestInfo(1, 0, (1, 2, 1)))
    drafter.finish(1)
    with pytest.raises(KeyError):
        draft_of(drafter, 1)


def test_grouped_drafts_from_a_finished_sibling():
    drafter = GroupedDrafter()
    feed(drafter, 1, 0, [10, 11, 12, 13, 14])
    drafter.begin(RequestInfo(2, 0, ()))
    assert draft_of(drafter, 2).token_ids == [10, 11, 12, 13]  # response start: the sibling's opening
    drafter.observe(2, [99, 12])
    assert draft_of(drafter, 2).token_ids == [13, 14]


def test_grouped_sees_live_sibling_tokens_at_once():
    drafter = GroupedDrafter(FREQUENCIES)
    drafter.begin(RequestInfo(1, 0, ()))
    drafter.begin(RequestInfo(2, 0, ()))
    drafter.observe(2, [7, 8])
    assert draft_of(drafter, 2).token_ids == []
    drafter.observe(1, [7, 8, 9, 4])
    draft = draft_of(drafter, 2)
    assert draft.token_ids == [9, 4]
    assert draft.scores == [1.0, 1.0]


def test_grouped_keeps_groups_apart_and_evicts_them():
    drafter = GroupedDrafter()
    feed(drafter, 1, 0, [1, 2, 3])
    drafter.begin(RequestInfo(2, 1, ()))
    drafter.observe(2, [1, 2])
    assert draft_of(drafter, 2, group_id=1).token_ids == []
    drafter.finish(2)
    drafter.advance_step(1)
    assert drafter.num_groups == 0


def test_grouped_keeps_a_group_with_live_requests_across_steps():
    drafter = GroupedDrafter()
    feed(drafter, 1, 0, [1, 2, 3])
    drafter.begin(RequestInfo(2, 0, ()))
    drafter.advance_step(1)
    assert drafter.num_groups == 1
    drafter.evict(0)
    assert drafter.num_groups == 0


def test_history_uses_previous_steps_only():
    drafter = HistoryDrafter(window=2, shape=FREQUENCIES)
    feed(drafter, 1, 7, [1, 2, 3, 4], step=0)
    drafter.begin(RequestInfo(2, 7, (), step=0))
    drafter.observe(2, [1, 2])
    assert draft_of(drafter, 2, group_id=7).token_ids == []  # step 0's responses join at step 1
    drafter.finish(2)
    drafter.advance_step(1)
    drafter.begin(RequestInfo(3, 7, (), step=1))
    drafter.observe(3, [1, 2])
    draft = draft_of(drafter, 3, group_id=7)
    assert draft.token_ids == [3, 4]
    # step 0 held [1, 2, 3, 4] and [1, 2]; only occurrences followed by a token count
    assert draft.scores == [1.0, 1.0]


def test_history_weights_recent_steps_more():
    drafter = HistoryDrafter(window=3, decay=0.5, shape=FREQUENCIES)
    feed(drafter, 1, 0, [1, 2, 3], step=0)
    drafter.advance_step(1)
    feed(drafter, 2, 0, [1, 2, 4], step=1)
    drafter.advance_step(2)
    drafter.begin(RequestInfo(3, 0, (), step=2))
    drafter.observe(3, [1, 2])
    draft = draft_of(drafter, 3)
    assert draft.token_ids == [4]
    assert draft.scores == pytest.approx([2 / 3])


def test_history_window_slides_out_old_steps():
    drafter = HistoryDrafter(window=1)
    feed(drafter, 1, 0, [1, 2, 3], step=0)
    drafter.advance_step(1)
    feed(drafter, 2, 0, [5, 6, 7], step=1)
    drafter.advance_step(2)
    assert drafter.num_responses(0) == 1
    drafter.begin(RequestInfo(3, 0, (), step=2))
    drafter.observe(3, [1, 2])
    assert draft_of(drafter, 3).token_ids == []
    drafter.observe(3, [5])
    assert draft_of(drafter, 3).token_ids == [6, 7]
    drafter.finish(3)
    drafter.evict(0)
    assert drafter.num_problems == 0


class _Fixed(BaseDrafter):
    def __init__(self, tokens, scores):
        self.tokens, self.scores, self.calls = tokens, scores, []

    def propose(self, queries):
        return [Draft(q.request_id, list(self.tokens), None, list(self.scores)) for q in queries]

    def observe(self, request_id, token_ids):
        self.calls.append((request_id, list(token_ids)))


def test_combined_takes_the_draft_with_the_highest_expected_gain():
    short_sure = _Fixed([1, 2], [1.0, 0.9])
    long_doubtful = _Fixed([3, 4, 5, 6], [0.6, 0.4, 0.3, 0.2])
    combined = CombinedDrafter([long_doubtful, short_sure])
    assert combined.propose([query(1)])[0].token_ids == [1, 2]
    combined.observe(1, [1])
    assert short_sure.calls == long_doubtful.calls == [(1, [1])]


def test_combined_ties_go_to_the_first_drafter():
    combined = CombinedDrafter([_Fixed([1], [1.0]), _Fixed([2], [1.0])])
    assert combined.propose([query(1)])[0].token_ids == [1]


def test_short_matches_are_discounted_in_the_scores():
    drafter = OwnContextDrafter(DraftShape(short_match_discount=2.0))
    drafter.begin(RequestInfo(1, 0, (5, 6, 7, 8)))
    drafter.observe(1, [9, 5, 6])
    draft = draft_of(drafter, 1, budget=2)
    # matched [5, 6] (2 tokens): 7 scores 2/4; then [5, 6, 7] (3 tokens): 8 adds a factor 3/5
    assert draft.token_ids == [7, 8]
    assert draft.scores == pytest.approx([1 / 2, 1 / 2 * 3 / 5])


def test_a_long_match_outranks_an_equally_frequent_short_one():
    # own context matches one token ([4] -> 9), the sibling three ([2, 3, 4] -> 5): both seen once
    own, shared = OwnContextDrafter(), GroupedDrafter()
    combined = CombinedDrafter([own, shared])
    feed(combined, 1, 0, [1, 2, 3, 4, 5, 6])
    combined.begin(RequestInfo(2, 0, (4, 9)))
    combined.observe(2, [2, 3, 4])
    assert combined.propose([query(2)])[0].token_ids[:2] == [5, 6]


@pytest.mark.parametrize("seed", range(5))
def test_drafts_do_not_depend_on_whether_earlier_steps_drafted(seed):
    """Drafters defer their index work to `propose`; skipping proposals must not change later drafts."""
    import random

    rng = random.Random(seed)
    history = [[rng.randrange(4) for _ in range(30)] for _ in range(3)]
    output = [rng.randrange(4) for _ in range(40)]

    def make():
        drafter = CombinedDrafter([GroupedDrafter(), HistoryDrafter(window=2), OwnContextDrafter()])
        for step, response in enumerate(history):
            feed(drafter, 100 + step, 0, response, step)
            drafter.advance_step(step + 1)
        drafter.begin(RequestInfo(1, 0, (3, 2), len(history)))
        return drafter

    every_step, last_only = make(), make()
    for position, token in enumerate(output):
        every_step.propose([query(1, [3, 2, *output[:position]])])
        every_step.observe(1, [token])
        last_only.observe(1, [token])
        if position == 20:  # a step change while the request is live
            every_step.advance_step(len(history) + 1)
            last_only.advance_step(len(history) + 1)
    assert draft_of(every_step, 1, budget=6) == draft_of(last_only, 1, budget=6)


def test_a_drafts_main_chain_is_its_leading_nodes_each_the_child_of_the_one_before():
    from specroll.drafting.protocol import Draft

    assert Draft(0, [5, 6, 7]).main_chain_length == 3  # linear
    assert Draft(0, [5, 6, 7, 8], parents=[-1, 0, 0, 2]).main_chain_length == 2  # a sibling at node 2
    assert Draft(0, [5, 6], parents=[-1, -1]).main_chain_length == 1  # two roots
    assert Draft(0, [5, 6], parents=[-1, 0]).main_chain_length == 2  # a tree that is a chain
    assert Draft(0).main_chain_length == 0
