"""Bad input gets a 4xx in OpenAI's shape naming the field, and harms no one: a request running beside
each bad one finishes with the tokens it gets alone. A client that goes away frees its slot."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

GOOD = {"prompt": [5, 6, 7], "max_tokens": 90, "seed": 11, "return_token_ids": True, "logprobs": 0}
CASES = [
    ("malformed JSON", b"{not json", 400, None),
    ("missing prompt", {"max_tokens": 4}, 400, "prompt"),
    ("empty prompt", {"prompt": []}, 400, "prompt"),
    ("empty text", {"prompt": ""}, 400, "prompt"),
    ("ids outside vocab", {"prompt": [1, 99999]}, 400, "prompt"),
    ("beyond context", {"prompt": [5] * 100, "max_tokens": 90}, 400, "max_tokens"),
    ("n beyond limit", {"prompt": [5], "n": 1000}, 400, "n"),
    ("max_tokens beyond limit", {"prompt": [5], "max_tokens": 100000}, 400, "max_tokens"),
    ("negative temperature", {"prompt": [5], "temperature": -1}, 400, "temperature"),
    ("top_p zero", {"prompt": [5], "top_p": 0}, 400, "top_p"),
    ("top_p above one", {"prompt": [5], "top_p": 1.5}, 400, "top_p"),
    ("unknown model", {"prompt": [5], "model": "gpt-9"}, 404, "model"),
    ("unsupported min_p", {"prompt": [5], "min_p": 0.1}, 400, "min_p"),
    ("unsupported penalty", {"prompt": [5], "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("unsupported logit_bias", {"prompt": [5], "logit_bias": {"5": 3}}, 400, "logit_bias"),
    ("unknown field", {"prompt": [5], "frobnicate": 1}, 400, "frobnicate"),
    ("top logprobs past 20", {"prompt": [5], "logprobs": 21}, 400, "logprobs"),
    ("wrong type", {"prompt": [5], "max_tokens": "many"}, 400, "max_tokens"),
    ("oversized body", {"prompt": [5] * 3_000_000}, 413, None),
]


def _run(url: str, out: dict) -> None:
    out["body"] = httpx.post(url + "/v1/completions", json=GOOD, timeout=60).json()


@pytest.fixture(scope="module")
def alone(server):
    return httpx.post(server.url + "/v1/completions", json=GOOD, timeout=60).json()["choices"][0]["token_ids"]


@pytest.mark.parametrize("name,body,status,param", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_by_name_beside_a_running_request(server, alone, name, body, status, param):
    out: dict = {}
    beside = threading.Thread(target=_run, args=(server.url, out))
    beside.start()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = httpx.post(
        server.url + "/v1/completions",
        content=content,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    beside.join()
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param and param in error["message"]
    assert out["body"]["choices"][0]["token_ids"] == alone


def _aborted(url: str) -> int:
    metrics = httpx.get(url + "/metrics").text
    rows = [
        line
        for line in metrics.splitlines()
        if line.startswith('specroll_requests_finished_total{reason="abort"}')
    ]
    return int(float(rows[0].split()[-1])) if rows else 0


def test_a_client_that_goes_away_frees_its_slot(server):
    """Held by a pause (so they cannot finish first), the clients give up: all their choices end."""
    before = _aborted(server.url)
    httpx.post(server.url + "/pause", params={"mode": "keep"})
    try:
        body = {"prompt": [5, 6], "max_tokens": 90, "n": 40, "seed": 1}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(server.url + "/v1/completions", json=body, timeout=1.0)
        with httpx.stream("POST", server.url + "/v1/completions", json={**body, "n": 8, "stream": True}) as s:
            assert s.status_code == 200  # then the streaming client goes away too
        deadline = time.monotonic() + 10
        while _aborted(server.url) < before + 48 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        httpx.post(server.url + "/resume")
    assert _aborted(server.url) == before + 48
    metrics = httpx.get(server.url + "/metrics").text
    assert "specroll_requests_running 0" in metrics and "specroll_requests_waiting 0" in metrics


def test_a_key_guards_every_endpoint_but_health(plain_server):
    from conftest import API_KEY

    assert httpx.get(plain_server.url + "/health").status_code == 200
    refused = httpx.get(plain_server.url + "/v1/models")
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert httpx.post(plain_server.url + "/v1/completions", json={"prompt": [5]}).status_code == 401
    ok = httpx.get(plain_server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    assert ok.status_code == 200


def test_a_host_beyond_loopback_needs_a_key(capsys):
    from specroll.cli import main

    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--api-key" in capsys.readouterr().err
    from specroll.serve.launch import check_exposure

    check_exposure("::1", None)  # loopback: fine without
