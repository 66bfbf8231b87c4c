"""Prompt lookup: literal drafts."""

from __future__ import annotations

from specroll.drafting.prompt_lookup import NgramTable, PromptLookupDrafter
from specroll.drafting.protocol import DraftQuery, RequestInfo


def test_longest_ngram_most_recent_occurrence():
    table = NgramTable(1, 3)
    table.extend([1, 2, 3, 9, 1, 2, 3, 7, 8, 2, 3])
    # suffix (2, 3) last seen followed by 7 (index 7), the 3-gram (8, 2, 3) never before
    assert table.propose(3) == [7, 8, 2]


def test_no_match_proposes_nothing():
    table = NgramTable(2, 3)
    table.extend([1, 2, 3, 4])
    assert table.propose(4) == []


def test_drafter_follows_committed_tokens():
    drafter = PromptLookupDrafter(min_n=1, max_n=2)
    drafter.begin(RequestInfo(0, 0, (5, 6, 7, 8)))
    drafter.observe(0, [5, 6])
    [draft] = drafter.propose([DraftQuery(0, 0, [5, 6, 7, 8, 5, 6], 4, 2)])
    assert draft.token_ids == [7, 8]
