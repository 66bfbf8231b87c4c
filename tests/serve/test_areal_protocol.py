"""AReaL's remote vLLM engine (`areal/engine/vllm_remote.py`, `areal/infra/remote_inf_engine.py`) against
`specroll serve`: its exact payloads replayed over HTTP, its responses parsed the way it parses them.

What it sends and reads is fixed here, so this runs without AReaL installed (AReaL 1.0.4's own client
runs in tests/serve/test_areal_client.py, where .venv-areal is built):
- health: GET /health with a JSON body {} (only the status is read);
- generate: POST /v1/completions with a token-id `prompt`, no `model`, `top_k` 100000000 (off),
  `return_tokens_as_token_ids`, `logprobs` 0, `ignore_eos`/`use_beam_search` false, `stream` false; it
  reads `choices[0].finish_reason` and `choices[0].logprobs.tokens` ("token_id:N") and
  `.token_logprobs`, and on "abort" resends prompt + partial tokens with `max_tokens` reduced;
- /areal_pause_generation (aborts what runs, holds new requests), /areal_continue_generation,
  /areal_update_weights {"model_path": DIR}, /sleep and /wake_up?tags=... with a body {}."""

from __future__ import annotations

import math
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import SMALL_SERVER, http_json, module_server, perturbed_copy  # noqa: E402

LONG_PROMPT = "add " + " ".join(f"{chr(ord('a') + i)}{(3 * i) % 9 + 1}" for i in range(20)) + "\n"


def areal_payload(prompt: list[int], max_tokens: int, temperature: float = 1.0) -> dict:
    """`VLLMBackend.build_generation_request` on AReaL's default GenerationHyperparameters."""
    return {
        "top_p": 1.0,
        "top_k": 100000000,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stop_token_ids": [],
        "ignore_eos": False,
        "skip_special_tokens": True,
        "return_tokens_as_token_ids": True,
        "logprobs": 0,
        "use_beam_search": False,
        "stream": False,
        "prompt": list(prompt),
    }


def areal_parse(response: dict) -> tuple[list[int], list[float], str]:
    """`VLLMBackend.parse_generation_response`: tokens from "token_id:N", their logprobs, the reason."""
    choice = response["choices"][0]
    logprobs = choice["logprobs"]
    assert isinstance(logprobs, dict) and "tokens" in logprobs, choice
    tokens = [int(t.split(":")[1]) for t in logprobs["tokens"]]
    return tokens, list(logprobs["token_logprobs"]), choice["finish_reason"]


def areal_generate(url: str, prompt: list[int], max_new_tokens: int, temperature: float = 1.0) -> dict:
    """`RemoteInfEngine.agenerate`'s loop: resend prompt + partial tokens until stop or length."""
    prompt, tokens, logprobs, reason, calls = list(prompt), [], [], None, 0
    while reason not in ("stop", "tool_calls", "length") and len(tokens) < max_new_tokens:
        status, body = http_json(
            f"{url}/v1/completions", areal_payload(prompt, max_new_tokens - len(tokens), temperature)
        )
        assert status == 200, body
        new, new_logprobs, reason = areal_parse(body)
        tokens += new
        logprobs += new_logprobs
        prompt += new
        calls += 1
    return {"tokens": tokens, "logprobs": logprobs, "reason": reason, "calls": calls}


@pytest.fixture(scope="module")
def tokenizer():
    from specroll.rollout import DEFAULT_MODEL
    from specroll.tokenizer import load_tokenizer

    return load_tokenizer(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from module_server(tmp_path_factory, "areal", SMALL_SERVER)


def metrics(url: str) -> dict[str, float]:
    """The server's unlabelled Prometheus counters and gauges (/metrics), by name."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=60) as response:
        lines = response.read().decode().splitlines()
    rows = (line.split() for line in lines if line and not line.startswith("#") and "{" not in line)
    return {name: float(value) for name, value in rows}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Return once `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.005)


def engine_round_trip(url: str) -> None:
    """/weight_info runs in the engine thread, between forwards, after every request submitted before
    it (the thread's inbox is first in, first out): once it answers, they have been taken in."""
    status, body = http_json(f"{url}/weight_info")
    assert status == 200, body


def test_health_with_a_json_body_reports_the_serving_weights(server):
    status, body = http_json(f"{server.url}/health", {}, method="GET")
    assert status == 200, body
    _, info = http_json(f"{server.url}/weight_info")
    assert body == {"status": "ok", "weight_version": info["weight_version"]}


def test_completions_as_areal_sends_and_reads_them(server, tokenizer):
    prompt = tokenizer.encode("add a7 b5 c9\n")
    status, body = http_json(f"{server.url}/v1/completions", areal_payload(prompt, 16))
    assert status == 200, body
    tokens, logprobs, reason = areal_parse(body)
    assert reason in ("stop", "length") and 1 <= len(tokens) <= 16
    assert all(0 <= t < len(tokenizer.hf) for t in tokens)
    assert len(logprobs) == len(tokens)
    assert all(isinstance(x, float) and math.isfinite(x) and x <= 0.0 for x in logprobs)
    assert reason == "length" or tokens[-1] in tokenizer.stop_token_ids

    # greedy (AReaL sends temperature 0.0) is the same twice
    first = areal_generate(server.url, prompt, 16, temperature=0.0)
    assert areal_generate(server.url, prompt, 16, temperature=0.0)["tokens"] == first["tokens"]


def test_pause_aborts_running_holds_new_and_continue_resumes(server, tokenizer):
    prompt = tokenizer.encode(LONG_PROMPT)
    max_new = 150
    results: dict[str, tuple] = {}

    def send(name: str) -> None:
        results[name] = http_json(f"{server.url}/v1/completions", areal_payload(prompt, max_new))

    # the pause finds the request generating: it has emitted tokens (it runs ~0.7 s for 150)
    emitted = metrics(server.url)["specroll_output_tokens_total"]
    running = threading.Thread(target=send, args=("running",))
    running.start()
    wait_for(lambda: metrics(server.url)["specroll_output_tokens_total"] > emitted, "its first token")
    status, body = http_json(f"{server.url}/areal_pause_generation", {})
    assert status == 200, body
    running.join(timeout=30)
    assert not running.is_alive(), "a running request was not answered after /areal_pause_generation"
    status, body = results["running"]
    assert status == 200, body
    partial, partial_logprobs, reason = areal_parse(body)
    assert reason == "abort", (reason, len(partial))
    assert 1 <= len(partial) < max_new and len(partial_logprobs) == len(partial)

    # sent while paused, the request is taken in and held: no forward runs until continue
    before = metrics(server.url)
    held = threading.Thread(target=send, args=("held",))
    held.start()
    total = before["specroll_requests_total"]
    wait_for(lambda: metrics(server.url)["specroll_requests_total"] > total, "the held request's arrival")
    engine_round_trip(server.url)  # the engine thread has taken it in
    engine_round_trip(server.url)  # and has since had its chance to run a forward
    while_paused = metrics(server.url)
    assert "held" not in results, "a request sent while paused was answered before continue"
    for counter in ("specroll_prefills_total", "specroll_forwards_total", "specroll_output_tokens_total"):
        assert while_paused[counter] == before[counter], counter
    assert while_paused["specroll_requests_running"] == 0 and while_paused["specroll_requests_waiting"] == 1
    status, body = http_json(f"{server.url}/areal_continue_generation", {})
    assert status == 200, body
    held.join(timeout=60)
    assert not held.is_alive()
    status, body = results["held"]
    assert status == 200, body
    assert areal_parse(body)[2] in ("stop", "length")

    # AReaL's own continuation of the aborted rollout: prompt + partial tokens, max_tokens reduced
    rest = areal_generate(server.url, prompt + partial, max_new - len(partial))
    assert rest["reason"] in ("stop", "length")
    assert len(partial) + len(rest["tokens"]) <= max_new


def test_update_weights_from_disk_changes_greedy_tokens(server, tokenizer, tmp_path):
    from specroll.rollout import DEFAULT_MODEL

    prompt = tokenizer.encode("add a7 b5 c9\n")
    before = areal_generate(server.url, prompt, 16, temperature=0.0)
    status, info_before = http_json(f"{server.url}/weight_info")
    assert status == 200, info_before

    status, body = http_json(f"{server.url}/areal_update_weights", {"model_path": str(tmp_path / "missing")})
    assert 400 <= status < 500, body

    weights = perturbed_copy(DEFAULT_MODEL, tmp_path / "perturbed")
    status, body = http_json(f"{server.url}/areal_update_weights", {"model_path": str(weights)})
    assert status == 200 and body["success"] is True, body
    status, info_after = http_json(f"{server.url}/weight_info")
    assert info_after["weight_version"] != info_before["weight_version"]
    health = http_json(f"{server.url}/health", {}, method="GET")[1]
    assert health["weight_version"] == info_after["weight_version"]  # health names the weights now serving
    after = areal_generate(server.url, prompt, 16, temperature=0.0)
    assert after["tokens"] != before["tokens"]


def test_offload_and_onload(server, tokenizer):
    assert http_json(f"{server.url}/sleep", {})[0] == 200
    assert http_json(f"{server.url}/wake_up?tags=weights&tags=kv_cache", {})[0] == 200
    out = areal_generate(server.url, tokenizer.encode("add a7 b5 c9\n"), 8)
    assert out["reason"] in ("stop", "length") and out["tokens"]
