"""The real `openai` client against the server: token-id prompts, n, seed, logprobs, vLLM's
return_token_ids, streaming; every choice says its seed, index and weight version."""

from __future__ import annotations

import openai
import pytest

PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def complete(client, max_tokens: int, extra: dict | None = None, **settings):
    """A completion of PROMPT by the policy, its token ids returned (vLLM's `return_token_ids`)."""
    return client.completions.create(
        model="policy",
        prompt=PROMPT,
        max_tokens=max_tokens,
        extra_body={"return_token_ids": True, **(extra or {})},
        **settings,
    )


def test_completion_with_token_ids_n_seed_and_logprobs(client):
    out = complete(client, 12, n=3, seed=7, logprobs=0)
    assert len(out.choices) == 3
    for i, choice in enumerate(out.choices):
        extra = choice.model_extra
        assert extra["prompt_token_ids"] == PROMPT
        assert 1 <= len(extra["token_ids"]) <= 12
        assert len(choice.logprobs.token_logprobs) == len(extra["token_ids"])
        assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)
        assert (extra["seed"], extra["sample_index"], extra["weight_version"]) == (7, i, 0)
        assert choice.finish_reason in ("stop", "length")
    assert len({c.model_extra["group_id"] for c in out.choices}) == 1  # the n choices form one group
    again = complete(client, 12, n=3, seed=7)
    assert [c.model_extra["token_ids"] for c in again.choices] == [
        c.model_extra["token_ids"] for c in out.choices
    ]


def test_a_request_without_seed_gets_one_that_replays_it(client):
    out = complete(client, 10)
    replay = complete(client, 10, seed=out.model_extra["seed"])
    assert replay.choices[0].model_extra["token_ids"] == out.choices[0].model_extra["token_ids"]


def test_tokens_as_token_ids(client):
    out = complete(client, 5, {"return_tokens_as_token_ids": True}, seed=1, logprobs=1)
    ids = out.choices[0].model_extra["token_ids"]
    assert out.choices[0].logprobs.tokens == [f"token_id:{t}" for t in ids]


def test_streaming_gives_the_same_tokens_and_ends_with_done(client, server):
    whole = complete(client, 16, n=2, seed=3)
    stream = complete(client, 16, n=2, seed=3, stream=True)
    tokens, text, finish = {0: [], 1: []}, {0: "", 1: ""}, {}
    for chunk in stream:
        for c in chunk.choices:
            tokens[c.index] += c.model_extra.get("token_ids") or []
            text[c.index] += c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert [tokens[0], tokens[1]] == [c.model_extra["token_ids"] for c in whole.choices]
    assert [text[0], text[1]] == [c.text for c in whole.choices]
    assert finish == {0: whole.choices[0].finish_reason, 1: whole.choices[1].finish_reason}
    import httpx

    raw = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, "stream": True})
    assert raw.text.rstrip().endswith("data: [DONE]")


def test_stop_strings_end_the_choice_and_trim_the_text(client):
    out = client.completions.create(
        model="policy", prompt=PROMPT, max_tokens=40, seed=5, extra_body={"return_token_ids": True}
    )
    text = out.choices[0].text
    if len(text) < 4:
        pytest.skip("too short a sample to cut")
    stop = text[2:4]
    cut = client.completions.create(
        model="policy",
        prompt=PROMPT,
        max_tokens=40,
        seed=5,
        stop=[stop],
        extra_body={"return_token_ids": True},
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.find(stop)]
    ids = out.choices[0].model_extra["token_ids"]
    assert cut.choices[0].model_extra["token_ids"] == ids[: len(cut.choices[0].model_extra["token_ids"])]


def test_models_and_metrics(client, server):
    import httpx

    assert client.models.list().data[0].id == "policy"
    metrics = httpx.get(server.url + "/metrics").text
    for name in (
        "specroll_requests_running",
        "specroll_requests_waiting",
        "specroll_output_tokens_per_second",
        "specroll_tokens_per_forward",
        "specroll_batch_size",
        "specroll_weight_version",
        "specroll_acceptance_length",
    ):
        assert name in metrics
