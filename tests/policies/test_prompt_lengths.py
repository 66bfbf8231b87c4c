"""Each prompt's own finished lengths: a sorted window a prompt, a bound on the prompts kept (least
recently used dropped), one shared tuple a prompt until its history changes."""

import pytest

from specroll.policies.prompt_lengths import PromptLengths, prompt_key


def test_a_prompt_keeps_its_last_window_lengths_sorted():
    lengths = PromptLengths(window=3)
    for n in (50, 10, 30, 20):
        lengths.add("a", n)
    lengths.add("b", 7)
    assert lengths.sorted("a") == (10, 20, 30) and lengths.sorted("b") == (7,)
    assert lengths.sorted("unseen") == () and len(lengths) == 2


def test_the_least_recently_used_prompt_is_dropped_past_the_bound():
    lengths = PromptLengths(max_prompts=2)
    lengths.add("a", 1)
    lengths.add("b", 2)
    lengths.sorted("a")  # read: "b" is now the least recently used
    lengths.add("c", 3)
    assert lengths.sorted("b") == () and lengths.sorted("a") == (1,) and lengths.sorted("c") == (3,)
    lengths.add("a", 4)  # written after "c" was last read: "c" is now the least recently used
    lengths.add("d", 5)
    assert lengths.sorted("c") == () and lengths.sorted("a") == (1, 4) and len(lengths) == 2


def test_one_tuple_is_shared_until_the_prompt_has_a_new_length():
    lengths = PromptLengths()
    lengths.add("a", 9)
    lengths.add("b", 1)
    first = lengths.sorted("a")
    lengths.add("b", 2)  # another prompt's history changes
    assert lengths.sorted("a") is first
    lengths.add("a", 3)
    assert lengths.sorted("a") == (3, 9) and lengths.sorted("a") is not first


def test_a_prompt_key_depends_on_the_token_ids_only():
    assert prompt_key([5, 6, 7]) == prompt_key((5, 6, 7)) != prompt_key((5, 6, 8))


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        PromptLengths(window=0)
    with pytest.raises(ValueError):
        PromptLengths(max_prompts=0)
