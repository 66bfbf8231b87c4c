"""The draft window's rule, literally: a draft made ahead is used only as far as the target followed it."""

from specroll.drafting.ahead_window import AheadDraft, usable_tokens

PROMPT = [5, 6, 7]
DRAFT = AheadDraft(request_id=0, context_length=3, token_ids=(10, 11, 12, 13))  # made at context PROMPT


def test_at_the_context_it_was_drafted_at_the_whole_draft_is_usable():
    assert usable_tokens(DRAFT, PROMPT, budget=8) == [10, 11, 12, 13]


def test_accepted_tokens_shift_the_draft():
    assert usable_tokens(DRAFT, [*PROMPT, 10], budget=8) == [11, 12, 13]
    assert usable_tokens(DRAFT, [*PROMPT, 10, 11, 12], budget=8) == [13]


def test_a_committed_token_off_the_draft_makes_it_stale():
    assert usable_tokens(DRAFT, [*PROMPT, 99], budget=8) == []
    assert usable_tokens(DRAFT, [*PROMPT, 10, 99], budget=8) == []


def test_the_budget_cuts_the_remainder():
    assert usable_tokens(DRAFT, PROMPT, budget=2) == [10, 11]
    assert usable_tokens(DRAFT, [*PROMPT, 10], budget=1) == [11]


def test_a_draft_used_up_is_too_old():
    assert usable_tokens(DRAFT, [*PROMPT, 10, 11, 12, 13], budget=8) == []
    assert usable_tokens(DRAFT, [*PROMPT, 10, 11, 12, 13, 14], budget=8) == []


def test_a_draft_from_a_longer_context_is_not_used():
    assert usable_tokens(DRAFT, PROMPT[:2], budget=8) == []


def test_only_the_tokens_committed_since_are_compared():
    """The context before the draft's length is not the rule's business (the drafter matches requests)."""
    assert usable_tokens(DRAFT, [0, 0, 0, 10], budget=8) == [11, 12, 13]
