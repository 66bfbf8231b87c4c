"""SuffixIndex: literal drafts, removal, weights, and a slow reference for the fast path."""

import random

import pytest

from specroll.drafting.suffix_index import Scoring, SuffixIndex

FREQUENCIES = Scoring(short_match_discount=0)  # scores are the continuation frequencies alone


def test_linear_draft_follows_most_frequent_continuation():
    index = SuffixIndex(max_depth=8)
    index.add("a", [7, 8, 9, 7, 8, 9, 7, 8, 10])
    proposal = index.propose(index.match([7, 8]), max_tokens=4, scoring=FREQUENCIES)
    # "7 8 9 7 8" was followed once by 9 and once by 10: the tie goes to the later one
    assert proposal.token_ids == [9, 7, 8, 10]
    assert proposal.scores == pytest.approx([2 / 3, 2 / 3, 2 / 3, 1 / 3])


def test_ties_go_to_the_most_recent_continuation():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2, 3, 4, 1, 2, 3, 5])
    proposal = index.propose(index.match([1, 2, 3]), max_tokens=4, scoring=FREQUENCIES)
    assert proposal.token_ids == [5]
    assert proposal.scores == [0.5]


def test_draft_backs_off_to_a_shorter_suffix_when_its_path_ends():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2, 3])
    index.add("b", [4, 3, 5, 6])
    proposal = index.propose(index.match([1, 2]), max_tokens=4, scoring=FREQUENCIES)
    assert proposal.token_ids == [3, 5, 6]  # "1 2 3" ends; "3" goes on in "b"
    assert proposal.scores == [1.0, 1.0, 1.0]


def test_draft_continues_past_the_depth_limit_through_suffix_links():
    index = SuffixIndex(max_depth=3)
    index.add("a", [1, 2, 3, 4, 5, 6])
    proposal = index.propose(index.match([9, 1]), max_tokens=8, scoring=FREQUENCIES)
    assert proposal.token_ids == [2, 3, 4, 5, 6]
    assert proposal.scores == [1.0] * 5


def test_min_prob_cuts_the_tail():
    index = SuffixIndex(max_depth=8)
    index.add("a", [7, 8, 9, 7, 8, 9, 7, 8, 10])
    assert index.propose(
        index.match([7, 8]), max_tokens=4, scoring=Scoring(min_prob=0.5, short_match_discount=0)
    ).token_ids == [9, 7, 8]


def test_match_finds_the_longest_indexed_suffix():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2, 3, 4])
    assert index.depth(index.match([5, 2, 3])) == 2
    assert index.depth(index.match([1, 2, 3])) == 3
    assert index.depth(index.match([6])) == 0
    assert index.depth(index.match([1, 2, 3, 4, 1, 2, 3, 4, 1, 2])) == 2


def test_continuation_point_skips_suffixes_never_followed():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2, 3, 4, 2, 3])
    tail = index.tail("a")  # "1 2 3 4 2 3": the sequence's end, followed by nothing
    point = index.continuation_point(tail)
    assert index.depth(point) == 2  # "2 3", once followed by 4
    assert index.children(point) == {4: 1.0}


def test_tree_draft_is_best_first_with_parents_before_children():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 5])
    tree = index.propose_tree(index.match([1]), max_depth=3, max_nodes=5, scoring=FREQUENCIES)
    assert tree.token_ids == [2, 3, 1, 5, 4]
    assert tree.parents == [-1, 0, 1, -1, 0]
    assert tree.scores == pytest.approx([3 / 4, 1 / 2, 1 / 2, 1 / 4, 1 / 4])


def test_sequences_extend_independently():
    index = SuffixIndex(max_depth=8)
    index.add("a", [1, 2])
    index.add("b", [1, 2, 5])
    index.extend("a", [3])
    assert index.children(index.match([1, 2])) == {5: 0.5, 3: 0.5}
    assert index.depth(index.tail("a")) == 3
    assert index.num_sequences == 2


def test_remove_restores_the_other_sequences_statistics():
    index = SuffixIndex(max_depth=4)
    index.add("a", [1, 2, 3, 1, 2, 4])
    index.add("b", [1, 2, 4, 4, 1, 2])
    index.remove("b")
    fresh = SuffixIndex(max_depth=4)
    fresh.add("a", [1, 2, 3, 1, 2, 4])
    assert index.num_nodes() == fresh.num_nodes()
    assert index.propose(index.match([1, 2]), 4) == fresh.propose(fresh.match([1, 2]), 4)
    index.remove("a")
    assert index.num_nodes() == 1
    assert index.propose(index.match([1, 2]), 4).token_ids == []


def test_weights_shift_probabilities():
    index = SuffixIndex(max_depth=8)
    index.add("old", [1, 2, 3], weight=1.0)
    index.add("new", [1, 2, 4], weight=3.0)
    assert index.children(index.match([1, 2])) == {3: 0.25, 4: 0.75}
    assert index.propose(index.match([1, 2]), 2).token_ids == [4]


def test_adding_a_known_sequence_id_is_an_error():
    index = SuffixIndex()
    index.add("a", [1])
    with pytest.raises(ValueError):
        index.add("a", [2])


def _reference_draft(sequences, context, max_depth, max_tokens):
    """Slow reference: count continuations of the longest followed suffix by scanning every sequence."""
    context, draft = list(context), []
    while len(draft) < max_tokens:
        followers = _followers_of_longest_suffix(sequences, context, max_depth)
        if not followers:
            break
        best = max(followers.values())
        # ties: the continuation whose latest occurrence was indexed last
        token = [t for t, c in followers.items() if c == best][-1]
        draft.append(token)
        context.append(token)
    return draft


def _followers_of_longest_suffix(sequences, context, max_depth):
    for length in range(min(len(context), max_depth - 1), 0, -1):
        suffix = context[len(context) - length :]
        followers = {}
        for seq in sequences:
            for i in range(len(seq) - length):
                if seq[i : i + length] == suffix:
                    token = seq[i + length]
                    followers[token] = followers.pop(token, 0) + 1  # re-insert: keeps last-seen order
        if followers:
            return followers
    return {}


@pytest.mark.parametrize("seed", range(20))
def test_fast_draft_matches_the_slow_reference(seed):
    rng = random.Random(seed)
    sequences = [[rng.randrange(4) for _ in range(rng.randrange(5, 40))] for _ in range(3)]
    index = SuffixIndex(max_depth=6)
    for i, seq in enumerate(sequences):
        index.add(i, seq)
    context = [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
    node = index.continuation_point(index.match(context))
    fast = index.propose(node, 6).token_ids if node is not None else []
    # the reference drafts from the longest followed suffix of at most max_depth - 1 tokens, re-matched
    # after each token, which is what suffix links give the fast path
    assert fast == _reference_draft(sequences, context, 6, 6)


@pytest.mark.parametrize("seed", range(10))
def test_removal_leaves_the_same_statistics_as_never_adding(seed):
    rng = random.Random(seed)
    kept = [[rng.randrange(4) for _ in range(rng.randrange(5, 40))] for _ in range(2)]
    index, fresh = SuffixIndex(max_depth=5), SuffixIndex(max_depth=5)
    index.add(0, kept[0])
    index.add("gone", [rng.randrange(4) for _ in range(30)])
    index.add(1, kept[1])
    index.remove("gone")
    for i, seq in enumerate(kept):
        fresh.add(i, seq)
    assert index.num_nodes() == fresh.num_nodes()
    for _ in range(20):
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 6))]
        a, b = index.match(context), fresh.match(context)
        assert index.depth(a) == fresh.depth(b)
        assert index.children(a) == pytest.approx(fresh.children(b))


@pytest.mark.parametrize("seed", range(10))
def test_tracked_followed_suffix_equals_the_walk_from_the_tail(seed):
    rng = random.Random(seed)
    index = SuffixIndex(max_depth=5)
    index.add("a", [])
    index.add("b", [rng.randrange(3) for _ in range(10)])
    for _ in range(30):
        seq_id = "a" if rng.random() < 0.8 else "b"
        index.extend(seq_id, [rng.randrange(3) for _ in range(rng.randrange(1, 4))])
        assert index.followed_suffix("a") == index.continuation_point(index.tail("a"))


@pytest.mark.parametrize("seed", range(10))
def test_deferred_appending_builds_the_index_eager_appending_would(seed):
    """The trie catches up on extensions only when read; reading after every extension must not matter."""
    rng = random.Random(seed)
    eager, deferred = SuffixIndex(max_depth=5), SuffixIndex(max_depth=5)
    for seq_id, weight in (("a", 1.0), ("b", 2.0), ("c", 0.5)):
        eager.add(seq_id, weight=weight)
        deferred.add(seq_id, weight=weight)
    for _ in range(40):
        seq_id = rng.choice("abc")
        tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 4))]
        eager.extend(seq_id, tokens)
        deferred.extend(seq_id, tokens)
        eager.followed_suffix(seq_id)  # a read: forces the eager index to catch up every time
    assert eager.num_nodes() == deferred.num_nodes()
    for seq_id in "abc":
        a, b = eager.followed_suffix(seq_id), deferred.followed_suffix(seq_id)
        assert (a is None) == (b is None)
        if a is not None:
            assert eager.propose(a, 6) == deferred.propose(b, 6)


def test_removing_a_sequence_never_read_leaves_no_trace():
    index, fresh = SuffixIndex(max_depth=4), SuffixIndex(max_depth=4)
    index.add("kept", [1, 2, 3])
    index.add("gone", [1, 2, 4])
    index.extend("kept", [1, 2])
    index.extend("gone", [5])
    index.remove("gone")
    fresh.add("kept", [1, 2, 3, 1, 2])
    assert index.num_nodes() == fresh.num_nodes()
    assert index.children(index.match([1, 2])) == fresh.children(fresh.match([1, 2])) == {3: 1.0}
