"""Edges of the served protocol a trial by hand found: resending an aborted choice without a seed,
aborting by the client's own ids (vLLM's `request_id`, SGLang's `rid`), text that is not valid
Unicode, JSON nested past any reader's depth, and the fields vLLM answers with (`stop_reason`,
`created` on stream chunks, `stream_options.include_usage`). None of them may give a 500."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import SMALL_SERVER, http_json, module_server  # noqa: E402
from test_areal_protocol import areal_parse, areal_payload, engine_round_trip, metrics, wait_for  # noqa: E402

PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from module_server(tmp_path_factory, "edges", SMALL_SERVER)


def _send_held(url: str, path: str, body: dict, results: dict, name: str) -> threading.Thread:
    """POST `body` from a thread; return once the paused server holds it."""
    total = metrics(url)["specroll_requests_total"]
    thread = threading.Thread(target=lambda: results.__setitem__(name, http_json(url + path, body)))
    thread.start()
    wait_for(lambda: metrics(url)["specroll_requests_total"] > total, f"{name}'s arrival")
    engine_round_trip(url)
    return thread


def test_an_unseeded_resend_reports_the_seed_that_drew_its_tokens(server):
    """AReaL resends an aborted choice as prompt + partial output, no seed: the server continues it
    with the aborted choice's seed, and the response must name that seed, not a fresh one."""
    results: dict = {}
    emitted = metrics(server.url)["specroll_output_tokens_total"]
    payload = areal_payload(PROMPT, 150)
    thread = threading.Thread(
        target=lambda: results.__setitem__("first", http_json(server.url + "/v1/completions", payload))
    )
    thread.start()
    wait_for(lambda: metrics(server.url)["specroll_output_tokens_total"] > emitted, "its first token")
    assert http_json(server.url + "/pause", {"mode": "abort"})[0] == 200
    thread.join(30)
    assert http_json(server.url + "/resume", {})[0] == 200
    status, first = results["first"]
    partial, _, reason = areal_parse(first)
    assert status == 200 and reason == "abort" and 1 <= len(partial) < 150, first
    status, rest = http_json(
        server.url + "/v1/completions", areal_payload(PROMPT + partial, 150 - len(partial))
    )
    assert status == 200, rest
    assert rest["seed"] == first["seed"] and rest["choices"][0]["seed"] == first["seed"]
    status, whole = http_json(server.url + "/v1/completions", {**payload, "seed": first["seed"]})
    assert partial + areal_parse(rest)[0] == areal_parse(whole)[0]  # the uninterrupted run's tokens


def test_abort_by_the_clients_own_ids_and_no_other(server):
    url, results = server.url, {}
    assert http_json(url + "/pause", {"mode": "keep"})[0] == 200
    try:
        mine = _send_held(
            url,
            "/v1/completions",
            {"prompt": PROMPT, "max_tokens": 8, "request_id": "mine-1"},
            results,
            "mine",
        )
        sgl = _send_held(
            url,
            "/generate",
            {"input_ids": PROMPT, "rid": "r-7", "sampling_params": {"max_new_tokens": 8}},
            results,
            "sgl",
        )
        other = _send_held(
            url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "seed": 3}, results, "other"
        )
        assert http_json(url + "/abort_request", {"rid": "someone-else"})[1]["aborted"] == 0
        assert http_json(url + "/abort_requests", {"request_ids": ["mine-1"]})[1]["aborted"] == 1
        assert http_json(url + "/abort_request", {"rid": "r-7"})[1]["aborted"] == 1
        mine.join(30), sgl.join(30)
    finally:
        http_json(url + "/resume", {})
    other.join(30)
    assert results["mine"][1]["choices"][0]["finish_reason"] == "abort"
    assert results["mine"][1]["id"] == "cmpl-mine-1"  # vLLM's id for a client's request_id
    assert results["sgl"][1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert results["sgl"][1]["meta_info"]["id"] == "r-7"
    assert results["other"][1]["choices"][0]["finish_reason"] == "length"


LONE_SURROGATE = b'{"prompt": "abc \\ud800 def", "max_tokens": 2}'


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
def test_a_lone_surrogate_is_refused_and_the_connection_serves_on(server, path):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        headers = {"content-type": "application/json"}
        answer = client.post(path, content=LONE_SURROGATE, headers=headers)
        assert answer.status_code == 400, answer.text
        assert "surrogate" in answer.json()["error"]["message"]
        again = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, "seed": 1})
        assert again.status_code == 200, again.text


def test_json_nested_past_any_depth_is_refused(server):
    answer = httpx.post(server.url + "/v1/completions", content=b"[" * 100_000, timeout=60)
    assert answer.status_code == 400 and "deep" in answer.json()["error"]["message"], answer.text


def test_stop_reason_is_the_matched_stop(server):
    body = {"prompt": PROMPT, "max_tokens": 40, "seed": 2, "return_token_ids": True}
    free = http_json(server.url + "/v1/completions", body)[1]["choices"][0]
    token = free["token_ids"][2]
    by_id = http_json(server.url + "/v1/completions", {**body, "stop_token_ids": [token]})[1]["choices"][0]
    assert by_id["finish_reason"] == "stop" and by_id["stop_reason"] == token
    text = free["text"][3:5] if len(free["text"]) >= 5 else free["text"][-1]
    by_text = http_json(server.url + "/v1/completions", {**body, "stop": [text]})[1]["choices"][0]
    assert by_text["finish_reason"] == "stop" and by_text["stop_reason"] == text
    assert free["stop_reason"] is None


def test_stream_chunks_carry_created_and_usage_when_asked(server):
    body = {
        "prompt": PROMPT,
        "max_tokens": 6,
        "seed": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as s:
        lines = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert all(isinstance(c["created"], int) for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert all(c.get("usage") is None for c in chunks[:-1])


def test_priority_is_read_not_dropped(server):
    ok = http_json(server.url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "priority": 0})
    assert ok[0] == 200, ok
    status, body = http_json(
        server.url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "priority": 3}
    )
    assert status == 400 and body["error"]["param"] == "priority", body


def test_an_unknown_model_does_not_name_the_servers_paths(server):
    from specroll.rollout import DEFAULT_MODEL

    status, body = http_json(server.url + "/v1/completions", {"prompt": PROMPT, "model": "gpt-9"})
    assert status == 404 and str(DEFAULT_MODEL) not in body["error"]["message"], body
    assert server.model_id() in body["error"]["message"]
