"""SIGTERM: the server stops taking requests, answers those in flight (finish_reason abort, with their
partial tokens) and exits 0."""

from __future__ import annotations

import threading
import time

import httpx

from specroll.serve.child import ServeProcess


def test_sigterm_answers_in_flight_requests_and_exits_0():
    args = ["--speculate", "off", "--max-model-len", "64", "--max-batch-size", "4"]
    server = ServeProcess(args).wait_ready()
    answers: list = []
    try:
        httpx.post(server.url + "/pause", params={"mode": "keep"})  # so the request is still in flight
        body = {"prompt": [5, 6, 7], "max_tokens": 20, "n": 2, "return_token_ids": True}
        sender = threading.Thread(
            target=lambda: answers.append(httpx.post(server.url + "/v1/completions", json=body, timeout=30))
        )
        sender.start()
        deadline = time.monotonic() + 20
        while "specroll_requests_waiting 2" not in httpx.get(server.url + "/metrics").text:
            assert time.monotonic() < deadline, "the request never arrived"
            time.sleep(0.05)
    finally:
        code = server.stop()
    sender.join(timeout=30)
    assert code == 0
    assert answers and answers[0].status_code == 200
    assert [c["finish_reason"] for c in answers[0].json()["choices"]] == ["abort", "abort"]
