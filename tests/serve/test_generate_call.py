"""The server's pure parts, without a server: keys, request parsing, stop strings, resumable aborts."""

from __future__ import annotations

import pytest

from specroll.serve.choice import Choice
from specroll.serve.errors import ApiError
from specroll.serve.keys import group_key, noise_key
from specroll.serve.generate_call import Limits, parse_completion, parse_sglang_generate, parse_skyrl_generate
from specroll.serve.resumable import AbortedChoices, Resumable

LIMITS = Limits(vocab_size=100, max_model_len=64, max_tokens=32, max_n=8, model_names=frozenset({"m"}))


class Codec:
    def encode_text(self, text, add_special_tokens):
        return [ord(c) % 100 for c in text]

    def encode_chat(self, messages, template_kwargs):
        raise ApiError("no template", "messages")


def test_keys_are_fixed_functions_of_seed_and_index():
    assert noise_key(7, 0) == noise_key(7, 0) != noise_key(7, 1) != noise_key(8, 0)
    assert 0 <= noise_key(2**64 - 1, 3) < 2**63
    assert noise_key(0, 0) == 6509419213283703624  # a literal: the key is part of what replays a seed
    assert group_key([1, 2, 3]) == group_key((1, 2, 3)) != group_key([1, 2, 4])


def test_completion_fields_and_their_refusals():
    call = parse_completion(
        {
            "prompt": [[1, 2], [3]],
            "n": 2,
            "seed": 5,
            "top_k": -1,
            "max_tokens": 4,
            "min_p": 0,
            "min_tokens": 1,
        },
        LIMITS,
        Codec(),
    )
    assert call.prompts == ((1, 2), (3,)) and call.n == 2 and call.seed == 5 and call.is_seeded
    assert call.params.top_k == 0 and call.params.max_tokens == 4
    assert parse_completion({"prompt": "ab"}, LIMITS, Codec()).params.max_tokens == 16  # OpenAI's default
    assert not parse_completion({"prompt": [1]}, LIMITS, Codec()).is_seeded
    for body, param in [
        ({"prompt": [1], "min_p": 0.2}, "min_p"),
        ({"prompt": [1], "n": True}, "n"),
        ({"prompt": [1], "continue_from": 2}, "continue_from"),
        ({"prompt": [1] * 60, "max_tokens": 8}, "max_tokens"),
        ({"prompt": [1], "top_p": 0.0}, "top_p"),
        ({"prompt": [1], "model": "other"}, "model"),
    ]:
        with pytest.raises(ApiError) as refused:
            parse_completion(body, LIMITS, Codec())
        assert refused.value.param == param


def test_skyrl_and_sglang_shapes():
    skyrl = parse_skyrl_generate(
        {"token_ids": [1, 2], "sampling_params": {"max_tokens": 3, "logprobs": 1, "min_tokens": 1}}, LIMITS
    )
    assert skyrl.logprobs and skyrl.params.max_tokens == 3
    with pytest.raises(ApiError) as refused:
        parse_skyrl_generate({"token_ids": [1], "sampling_params": {"repetition_penalty": 1.2}}, LIMITS)
    assert refused.value.param == "sampling_params.repetition_penalty"
    sglang = parse_sglang_generate(
        {
            "input_ids": [1],
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": 5, "sampling_seed": 3, "no_stop_trim": True},
        },
        LIMITS,
        Codec(),
    )
    assert (sglang.params.max_tokens, sglang.seed, sglang.include_stop_str, sglang.logprobs) == (
        5,
        3,
        True,
        True,
    )


def test_a_stop_string_cuts_tokens_and_text():
    choice = Choice(0, 0, 0, 0, (1,), decode=lambda ids: "".join(chr(96 + t) for t in ids), stop=("cd",))
    assert not choice.extend([1, 2], [-0.1, -0.2], version=0)  # "ab"
    assert choice.extend([3, 4, 5], [-0.3, -0.4, -0.5], version=0)  # "abcde": stops at "cd"
    assert (choice.token_ids, choice.text, choice.finish_reason) == ([1, 2, 3, 4], "ab", "stop")


def test_an_aborted_choice_resent_unseeded_is_continued():
    aborted = AbortedChoices(capacity=2)
    aborted.remember([1, 2], [3, 4], Resumable(2, seed=9, sample_index=1))
    call = aborted.resume(parse_completion({"prompt": [1, 2, 3, 4]}, LIMITS, Codec()))
    assert (call.continue_from, call.seed, call.sample_index) == ((2,), 9, 1)
    seeded = parse_completion({"prompt": [1, 2, 3, 4], "seed": 4}, LIMITS, Codec())
    assert aborted.resume(seeded) == seeded  # a client that gave a seed decides itself
