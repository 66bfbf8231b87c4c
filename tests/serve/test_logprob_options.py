"""vLLM's `logprobs: k` and `prompt_logprobs: k` on /v1/completions: the
scoring forward's numbers are the engine's, so a sampled token's log-probability read back as a prompt
token's (TRL's `get_sequence_logprobs` does exactly that) equals, to the bit, what the engine reported
when it drew the token; alternatives come most likely first, ranked, at most 20. Chat's
`top_logprobs` is tested in test_chat.py, on a model with a chat template."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import http_json, module_server  # noqa: E402

PROMPT = [5, 6, 7, 8, 9]
SAMPLED = {"prompt": PROMPT, "max_tokens": 24, "seed": 9, "temperature": 0.7, "return_token_ids": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from module_server(
        tmp_path_factory, "logprobs", ["--max-batch-size", "8", "--max-model-len", "128"]
    )


def _completion(url: str, body: dict) -> dict:
    status, answer = http_json(url + "/v1/completions", body)
    assert status == 200, answer
    return answer["choices"][0]


def test_prompt_logprobs_of_a_sampled_output_are_its_reported_logprobs(server):
    drawn = _completion(server.url, {**SAMPLED, "logprobs": 0})
    tokens, reported = drawn["token_ids"], drawn["logprobs"]["token_logprobs"]
    body = {"prompt": PROMPT + tokens, "max_tokens": 1, "temperature": 0.7, "prompt_logprobs": 3}
    scored = _completion(server.url, body)["prompt_logprobs"]
    assert scored[0] is None and len(scored) == len(PROMPT) + len(tokens)
    again = [scored[len(PROMPT) + i][str(t)]["logprob"] for i, t in enumerate(tokens)]
    assert again == reported  # to the bit: the same numerics as the sampled tokens'
    for position, entry in enumerate(scored[1:], start=1):
        ranked = sorted(entry.values(), key=lambda e: e["rank"])
        assert [e["rank"] for e in ranked[:3]] == [1, 2, 3]
        assert [e["logprob"] for e in ranked] == sorted((e["logprob"] for e in ranked), reverse=True)
        given = entry[str((PROMPT + tokens)[position])]
        assert given["rank"] > 3 or ranked[given["rank"] - 1]["logprob"] == given["logprob"]


def test_top_logprobs_list_the_k_most_likely_with_the_sampled_token(server):
    choice = _completion(server.url, {**SAMPLED, "logprobs": 5, "return_tokens_as_token_ids": True})
    logprobs = choice["logprobs"]
    for token, value, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert top[token] == value and 5 <= len(top) <= 6
        alternatives = [lp for name, lp in top.items() if name != token] or [value]
        assert max(top.values()) == max(alternatives + [value])
        assert all(name.startswith("token_id:") for name in top)
    greedy = _completion(server.url, {**SAMPLED, "temperature": 0, "logprobs": 2})
    for token, top in zip(greedy["logprobs"]["tokens"], greedy["logprobs"]["top_logprobs"]):
        assert top[token] == max(top.values())  # greedy takes the most likely


@pytest.mark.parametrize(
    "body,param",
    [
        ({"logprobs": 21}, "logprobs"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
        ({"logprobs": 2, "stream": True}, "logprobs"),
        ({"prompt_logprobs": 0, "stream": True}, "prompt_logprobs"),
    ],
)
def test_what_is_refused(server, body, param):
    status, answer = http_json(server.url + "/v1/completions", {"prompt": PROMPT, **body})
    assert status == 400 and answer["error"]["param"] == param, answer
