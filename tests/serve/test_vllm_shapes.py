"""specroll serve answers in `vllm serve`'s shapes: every probe of scripts/serve_conformance.py against
the shapes vLLM 0.32.0 answered with (recorded by the script's `--record`), and literal checks of each
field brought in line, on the bundled model (fast) where no chat template or vLLM's tokenizer is needed."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from conformance_script import RECORDING, load

from specroll.serve.choice import Choice
from specroll.serve.responses import version_spans

PROMPT = [5, 6, 7]


def _post(server, path: str, body: dict) -> dict:
    return httpx.post(server.url + path, json=body, timeout=60).json()


def _chunks(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=60) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


@pytest.mark.slow  # smollm2, every probe once: tens of seconds on a shared two-core machine
def test_every_probe_is_answered_in_vllm_shape_or_differs_on_purpose(chat_server):
    conf = load()
    recorded, _, long_prompt = conf.read_recording(RECORDING)
    ours = conf.observe(chat_server.url, "smollm2", long_prompt)
    findings = conf.compare_all(ours, recorded)
    unexpected = [f for f in findings if not f.is_same and f.name not in conf.DELIBERATE]
    assert not unexpected, conf.render(unexpected, ("specroll", "vllm 0.32.0"))


def test_completion_fields_are_there_when_not_asked_for(server):
    out = _post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "seed": 1})
    choice = out["choices"][0]
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None
    assert choice["prompt_logprobs"] is None and choice["logprobs"] is None
    assert out["service_tier"] is None and out["system_fingerprint"].startswith("specroll-")
    assert out["usage"]["prompt_tokens_details"] is None and out["usage"]["completion_tokens_details"] is None


def test_prompt_logprobs_decode_tokens_as_text_even_with_tokens_as_ids(server):
    body = {"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 0, "logprobs": 0}
    out = _post(server, "/v1/completions", {**body, "return_tokens_as_token_ids": True})
    plain = _post(server, "/v1/completions", body)
    assert out["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:")
    assert out["choices"][0]["prompt_logprobs"] == plain["choices"][0]["prompt_logprobs"]


def test_completion_stream_chunks_carry_vllm_fields(server):
    body = {"prompt": PROMPT, "max_tokens": 3, "n": 2, "seed": 1, "return_token_ids": True}
    chunks = _chunks(server, "/v1/completions", body)
    rows = [c["choices"][0] for c in chunks]
    assert all({"stop_reason", "token_ids", "prompt_token_ids", "logprobs"} <= set(row) for row in rows)
    firsts = {row["index"]: row for row in reversed(rows)}  # each choice's first chunk
    assert all(row["prompt_token_ids"] == PROMPT for row in firsts.values())
    assert sum(row["prompt_token_ids"] is not None for row in rows) == 2
    assert "system_fingerprint" in chunks[-1] and all("system_fingerprint" not in c for c in chunks[:-1])
    with_usage = _chunks(server, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    assert with_usage[-1]["choices"] == [] and "system_fingerprint" in with_usage[-1]


@pytest.mark.parametrize(
    "body,status", [({"prompt": PROMPT, "max_tokens": 0}, 400), ({"prompt": PROMPT, "model": "gpt-9"}, 404)]
)
def test_an_error_code_is_the_http_status_as_vllm_gives_it(server, body, status):
    answer = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == status and error["code"] == status
    assert set(error) == {"message", "type", "param", "code"}


def test_models_answer_vllm_model_card(server):
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"} == set(
        card
    )
    assert card["root"] == card["id"] and card["permission"][0]["object"] == "model_permission"


def test_tokenize_gives_token_strings_when_asked(server):
    plain = _post(server, "/tokenize", {"prompt": "ab"})
    asked = _post(server, "/tokenize", {"prompt": "ab", "return_token_strs": True})
    assert plain["token_strs"] is None
    assert len(asked["token_strs"]) == asked["count"] and all(isinstance(s, str) for s in asked["token_strs"])


def test_generate_carries_vllm_fields(server):
    body = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 2, "n": 2, "seed": 1}}
    out = _post(server, "/inference/v1/generate", body)
    assert isinstance(out["created"], int) and out["usage"]["completion_tokens"] == 4
    assert out["prompt_logprobs"] is None and out["prompt_token_ids"] is None
    assert all("stop_reason" in c for c in out["choices"])


def test_weight_versions_list_each_version_and_its_tokens():
    c = Choice(0, 0, 0, 0, (1,), decode=lambda ids: "", token_ids=[7] * 5, versions=[(0, 3), (2, 4)])
    assert version_spans(c) == [{"version": 3, "start": 0, "end": 2}, {"version": 4, "start": 2, "end": 5}]


def test_metrics_carry_vllm_load_series(server):
    text = httpx.get(server.url + "/metrics").text
    conf = load()
    series = conf.metric_series(text)
    assert set(series) == set(conf.LOAD_SERIES)
    assert set(series["vllm:num_requests_running"]) == {"engine", "model_name"}
    assert set(series["vllm:request_success_total"]) == {"engine", "model_name", "finished_reason"}


def test_response_ids_are_random_as_vllm_s(server):
    """Unique across restarts and replicas: an id a client kept from an earlier server aborts nothing."""
    body = {"prompt": PROMPT, "max_tokens": 1}
    ids = {_post(server, "/v1/completions", body)["id"] for _ in range(2)}
    assert len(ids) == 2 and all(re.fullmatch(r"cmpl-[0-9a-f]{16}", i) for i in ids)
