"""Chat completions through the model's chat template, on `smollm2` (the bundled model has none): the
`openai` client, whole and streamed, and the template's tokens seen by /tokenize."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.mark.slow  # a 135M-parameter model on the CPU: tens of seconds on a shared two-core machine
def test_chat_completion_whole_and_streamed(chat_server):
    client = openai.OpenAI(base_url=chat_server.url + "/v1", api_key="none")
    out = client.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,
        max_tokens=8,
        seed=2,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert len(choice.logprobs.content) == len(choice.model_extra["token_ids"])
    template = httpx.post(chat_server.url + "/tokenize", json={"messages": MESSAGES}).json()["tokens"]
    assert out.model_extra["prompt_token_ids"] == template
    stream = client.chat.completions.create(
        model="smollm2", messages=MESSAGES, max_tokens=8, seed=2, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == choice.message.content


@pytest.mark.slow
def test_chat_top_logprobs_list_the_k_most_likely(chat_server):
    client = openai.OpenAI(base_url=chat_server.url + "/v1", api_key="none")
    out = client.chat.completions.create(
        model="smollm2", messages=MESSAGES, max_tokens=4, seed=1, logprobs=True, top_logprobs=3
    )
    for entry in out.choices[0].logprobs.content:
        alternatives = [top.logprob for top in entry.top_logprobs]
        assert len(alternatives) == 3 and alternatives == sorted(alternatives, reverse=True)
        assert alternatives[0] >= entry.logprob


@pytest.mark.slow
def test_chat_answers_in_vllm_shape(chat_server):
    """vLLM's fields are there even when empty: the message's unused ones, the prompt's, and no
    alternatives in `top_logprobs` unless asked for (OpenAI's rule)."""
    body = {"model": "smollm2", "messages": MESSAGES, "max_tokens": 3, "seed": 4, "logprobs": True}
    out = httpx.post(chat_server.url + "/v1/chat/completions", json=body).json()
    choice = out["choices"][0]
    assert set(choice["message"]) == {
        "role",
        "content",
        "refusal",
        "annotations",
        "audio",
        "function_call",
        "reasoning",
    }
    assert choice["token_ids"] is None and out["prompt_token_ids"] is None and out["prompt_text"] is None
    assert out["prompt_logprobs"] is None and isinstance(out["system_fingerprint"], str)
    assert all(entry["top_logprobs"] == [] for entry in choice["logprobs"]["content"])
    with httpx.stream("POST", chat_server.url + "/v1/chat/completions", json={**body, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    opening = chunks[0]
    assert opening["choices"][0] == {
        "index": 0,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }
    assert opening["prompt_token_ids"] is None and "prompt_text" in opening
    assert all(c["choices"][0]["token_ids"] is None for c in chunks[1:])
    assert "system_fingerprint" in chunks[-1] and all("system_fingerprint" not in c for c in chunks[:-1])
