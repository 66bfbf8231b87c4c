"""How specroll's verl backend reads verl's calls and settings (`verl_requests.py`, `verl_settings.py`):
literal cases, without verl."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specroll.integrations.verl_requests import (
    RolloutLengths,
    check_text_only,
    generate_body,
    max_tokens,
    request_seed,
    stop_reason,
)
from specroll.integrations.verl_settings import as_flags, serve_flags, wants_gpu

LENGTHS = RolloutLengths(prompt_length=8, response_length=6, max_model_len=12)
AGENT_LOOP = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def test_the_agent_loops_call_becomes_a_generate_body():
    body = generate_body([5, 6, 7], {**AGENT_LOOP, "seed": 3}, "req-1", LENGTHS)
    assert body == {
        "token_ids": [5, 6, 7],
        "sampling_params": {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
                            "logprobs": 0, "seed": 3, "max_tokens": 6},
        "request_id": "req-1",
    }  # fmt: skip


def test_logprobs_false_asks_for_none_and_the_callers_dict_is_left_alone():
    params = {**AGENT_LOOP, "logprobs": False, "max_new_tokens": 4}
    body = generate_body([1], params, "r", LENGTHS)
    assert "logprobs" not in body["sampling_params"] and body["sampling_params"]["max_tokens"] == 4
    assert params["max_new_tokens"] == 4 and params["logprobs"] is False


@pytest.mark.parametrize(
    "prompt, given, expected",
    [
        (3, {}, 6),  # response_length
        (10, {}, 2),  # the room left in max_model_len
        (9, {}, 3),
        (3, {"max_tokens": 50}, 9),  # clamped to the room
        (3, {"max_tokens": 0}, 1),  # at least one token
        (3, {"max_new_tokens": 2}, 2),  # SGLang's name
    ],
)
def test_the_budget_follows_verls_vllm_server(prompt, given, expected):
    assert max_tokens(dict(given), prompt, LENGTHS) == expected


def test_a_prompt_filling_the_context_is_refused():
    with pytest.raises(ValueError, match="no room"):
        max_tokens({}, 12, LENGTHS)


def test_an_unseeded_call_is_left_to_the_server_to_seed():
    body = generate_body([1], {"temperature": 1.0}, "abc", LENGTHS)
    assert "seed" not in body["sampling_params"]


def test_under_full_determinism_an_unseeded_call_takes_its_seed_from_its_request_id():
    body = generate_body([1], {"temperature": 1.0}, "abc", LENGTHS, seed_from_id=True)
    assert body["sampling_params"]["seed"] == request_seed("abc")
    assert generate_body([1], {"seed": 5}, "abc", LENGTHS, seed_from_id=True)["sampling_params"]["seed"] == 5
    assert request_seed("abc") != request_seed("abd")
    assert 0 <= request_seed("abc") < 1 << 53


def test_media_is_refused_by_name():
    check_text_only(image_data=None, video_data=None, audio_data=None)
    with pytest.raises(ValueError, match="image_data: specroll serves text models only"):
        check_text_only(image_data=[object()], video_data=None)


@pytest.mark.parametrize(
    "finish, expected", [("stop", "completed"), ("length", "completed"), ("abort", "aborted"), (None, None)]
)
def test_stop_reasons_as_verls_vllm_server_maps_them(finish, expected):
    assert stop_reason(finish) == expected


def _rollout(**overrides):
    values = dict(prompt_length=64, response_length=32, max_model_len=None, seed=42, dtype="bfloat16",
                  engine_kwargs={})  # fmt: skip
    return SimpleNamespace(**(values | overrides))


def test_serve_flags_from_verls_rollout_settings():
    assert serve_flags(_rollout(), "/ckpt") == [
        "--model", "/ckpt", "--max-model-len", "96", "--max-tokens", "95", "--seed", "42",
        "--dtype", "bfloat16",
    ]  # fmt: skip


def test_engine_kwargs_specroll_adds_and_overrides_flags():
    specroll = {"speculate": "off", "max_batch_size": 4, "fast_numerics": True, "dtype": "float32"}
    kwargs = {"specroll": specroll, "vllm": {"enforce_eager": True}}
    flags = serve_flags(_rollout(max_model_len=128, dtype="fp32", engine_kwargs=kwargs), "/ckpt")
    assert flags == [
        "--model", "/ckpt", "--max-model-len", "128", "--max-tokens", "127", "--seed", "42",
        "--dtype", "float32", "--speculate", "off", "--max-batch-size", "4", "--fast-numerics",
    ]  # fmt: skip


def test_an_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="rollout.dtype: 'int8'"):
        serve_flags(_rollout(dtype="int8"), "/ckpt")


def test_flags_leave_out_false_and_none():
    assert as_flags({"a_b": False, "c": None, "d": True, "e": 0}) == ["--d", "--e", "0"]


def test_the_actor_holds_a_gpu_only_when_the_engine_runs_on_cuda():
    assert not wants_gpu(_rollout())
    assert wants_gpu(_rollout(engine_kwargs={"specroll": {"device": "cuda"}}))
