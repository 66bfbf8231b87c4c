"""Chat completions through the model's chat template, on `smollm2` (the bundled model has none): the
`openai` client, whole and streamed, and the template's tokens seen by /tokenize."""

from __future__ import annotations

import httpx
import openai
import pytest
from real_models import require_smollm2

from specroll.serve.child import ServeProcess

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def chat_server():
    require_smollm2()
    server = ServeProcess(
        [
            "--model",
            "smollm2",
            "--speculate",
            "off",
            "--max-model-len",
            "128",
            "--max-batch-size",
            "4",
            "--max-tokens",
            "16",
        ]
    )
    try:
        yield server.wait_ready()
    finally:
        server.stop()


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
