"""slime's rollout against `specroll serve` as an external SGLang engine (`--rollout-external-engine-addrs`):
its payloads replayed over HTTP and its responses parsed as it parses them.

slime is not installed (it needs SGLang and Megatron at import). What it sends and reads follows slime
0.1.x's `slime/rollout/sglang_rollout.py` (`generate`, `abort`) and `slime/backends/sglang_utils/
sglang_engine.py` (health, flush, pause/continue, weight version, disk updates), written from that code:
- generate: POST /generate {"input_ids": prompt + response so far, "sampling_params": {temperature,
  top_p, top_k, max_new_tokens, stop, stop_token_ids, skip_special_tokens, no_stop_trim,
  spaces_between_special_tokens}, "return_logprob": true}; it reads `meta_info.output_token_logprobs`
  ([logprob, token_id, ...] a token), `text`, and `meta_info.finish_reason.type` (length / abort / stop);
  an aborted sample is resent with its response appended and max_new_tokens reduced;
- abort: POST /abort_request {"abort_all": true};
- GET /health_generate, GET /flush_cache, POST /pause_generation, POST /continue_generation,
  GET /get_weight_version, GET /server_info, GET /v1/loads,
  POST /update_weights_from_disk {"model_path", "load_format", "flush_cache", "weight_version"};
- start-up (`SGLangEngine._init_external`): GET /get_server_info, then every setting slime would launch
  SGLang with (`_compute_server_args`, less `_EXTERNAL_ENGINE_SKIP_CHECK_FIELDS`) must equal ours;
- with top_p != 1, `sampling_params.custom_params = {"return_top_p_token_ids": true}`."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import SMALL_SERVER, http_json, module_server, perturbed_copy  # noqa: E402
from test_areal_protocol import metrics, wait_for  # noqa: E402

PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from module_server(tmp_path_factory, "slime", SMALL_SERVER)


def slime_sampling(max_new_tokens: int, temperature: float = 1.0) -> dict:
    """`sampling_params` as slime builds them from its rollout arguments (defaults)."""
    return {
        "temperature": temperature,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": max_new_tokens,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }


def slime_generate(url: str, tokens: list[int], max_new_tokens: int, temperature: float = 1.0) -> dict:
    """One call of slime's `generate`: the new tokens, their logprobs and the finish type."""
    payload = {
        "input_ids": tokens,
        "sampling_params": slime_sampling(max_new_tokens, temperature),
        "return_logprob": True,
    }
    status, output = http_json(f"{url}/generate", payload)
    assert status == 200, output
    meta = output["meta_info"]
    new_tokens = [item[1] for item in meta["output_token_logprobs"]]
    new_logprobs = [item[0] for item in meta["output_token_logprobs"]]
    return {"tokens": new_tokens, "logprobs": new_logprobs, "finish": meta["finish_reason"], "meta": meta}


def test_generate_as_slime_sends_and_reads_it(server):
    out = slime_generate(server.url, PROMPT, 12)
    assert out["finish"]["type"] in ("stop", "length") and 1 <= len(out["tokens"]) <= 12
    assert all(lp <= 0 for lp in out["logprobs"])
    meta = out["meta"]
    assert meta["cached_tokens"] == 0 and meta["e2e_latency"] > 0
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == len(out["tokens"])
    if out["finish"]["type"] == "length":
        assert out["finish"]["length"] == 12
    else:
        assert out["finish"]["matched"] == out["tokens"][-1]
    greedy = slime_generate(server.url, PROMPT, 12, temperature=0.0)
    assert slime_generate(server.url, PROMPT, 12, temperature=0.0)["tokens"] == greedy["tokens"]


def test_abort_all_and_resend_with_the_partial_response(server):
    results: dict = {}
    emitted = metrics(server.url)["specroll_output_tokens_total"]
    thread = threading.Thread(
        target=lambda: results.setdefault("out", slime_generate(server.url, PROMPT, 150))
    )
    thread.start()
    wait_for(lambda: metrics(server.url)["specroll_output_tokens_total"] > emitted, "its first token")
    status, body = http_json(f"{server.url}/abort_request", {"abort_all": True})
    assert status == 200, body
    thread.join(30)
    partial = results["out"]
    assert partial["finish"]["type"] == "abort" and len(partial["tokens"]) < 150
    rest = slime_generate(server.url, PROMPT + partial["tokens"], 150 - len(partial["tokens"]))
    assert rest["finish"]["type"] in ("stop", "length")


def slime_expected_settings(host: str, port: int, fp16: bool = False, offload: bool = False) -> dict:
    """What `_compute_server_args` puts in the fields slime checks, for one engine on one GPU."""
    expected = {"enable_memory_saver": offload, "host": host, "port": port, "nnodes": 1, "node_rank": 0,
                "gpu_id_step": 1, "base_gpu_id": 0}  # fmt: skip
    expected.update(tp_size=1, dp_size=1, pp_size=1, ep_size=1)
    return {**expected, "dtype": "float16"} if fp16 else expected


def slime_sanity_check(expected: dict, actual: dict) -> None:
    """slime's `_sanity_check_server_args`: each expected field equal, by name."""
    for name, value in expected.items():
        assert actual.get(name) == value, f"{name=} {value=} {actual.get(name)=}"


def test_server_info_passes_slimes_start_up_check(server):
    status, info = http_json(f"{server.url}/get_server_info")
    assert status == 200, info
    host, port = server.url.removeprefix("http://").split(":")
    slime_sanity_check(slime_expected_settings(host, int(port)), info)
    assert info["dtype"] == "float32" and info["enable_return_routed_experts"] is False
    with pytest.raises(AssertionError, match="enable_memory_saver"):
        slime_sanity_check(slime_expected_settings(host, int(port), offload=True), info)
    with pytest.raises(AssertionError, match="dtype"):  # an fp16 run against a float32 model
        slime_sanity_check(slime_expected_settings(host, int(port), fp16=True), info)


def test_top_p_nucleus_ids_are_refused_by_name(server):
    sampling = {**slime_sampling(4), "top_p": 0.9, "custom_params": {"return_top_p_token_ids": True}}
    payload = {"input_ids": PROMPT, "sampling_params": sampling, "return_logprob": True}
    status, body = http_json(f"{server.url}/generate", payload)
    param = "sampling_params.custom_params.return_top_p_token_ids"
    assert status == 400 and body["error"]["param"] == param, body
    assert "top_p 1.0" in body["error"]["message"]
    sampling["custom_params"] = {"return_top_p_token_ids": False}  # asks for nothing: generates
    assert http_json(f"{server.url}/generate", payload)[0] == 200


def test_control_routes_as_slime_calls_them(server, tmp_path):
    from specroll.rollout import DEFAULT_MODEL

    assert httpx.get(f"{server.url}/health_generate", timeout=60).status_code == 200
    status, info = http_json(f"{server.url}/server_info")
    assert status == 200 and info["context_length"] == 256 and info["max_running_requests"] == 8, info
    assert http_json(f"{server.url}/v1/loads")[1]["loads"][0]["num_running_reqs"] == 0
    assert http_json(f"{server.url}/pause_generation", {})[0] == 200
    assert (
        httpx.get(f"{server.url}/health_generate", timeout=60).status_code == 200
    )  # paused: idle by request
    assert http_json(f"{server.url}/continue_generation", {})[0] == 200
    before = http_json(f"{server.url}/get_weight_version")[1]["weight_version"]
    greedy = slime_generate(server.url, PROMPT, 12, temperature=0.0)
    assert greedy["meta"]["weight_version"] == before
    weights = perturbed_copy(DEFAULT_MODEL, tmp_path / "perturbed")
    update = {
        "model_path": str(weights),
        "load_format": None,
        "flush_cache": True,
        "weight_version": "rollout-7",
    }
    status, body = http_json(f"{server.url}/update_weights_from_disk", update)
    assert status == 200 and body["success"] is True, body
    assert http_json(f"{server.url}/get_weight_version")[1]["weight_version"] == "rollout-7"
    assert http_json(f"{server.url}/server_info")[1]["weight_version"] == "rollout-7"
    assert httpx.get(f"{server.url}/flush_cache", timeout=60).status_code == 200
    after = slime_generate(server.url, PROMPT, 12, temperature=0.0)
    assert after["tokens"] != greedy["tokens"] and after["meta"]["weight_version"] == "rollout-7"
    unnamed = {"model_path": str(weights)}  # no name given: the server's own count, as a string
    assert http_json(f"{server.url}/update_weights_from_disk", unnamed)[0] == 200
    assert http_json(f"{server.url}/get_weight_version")[1]["weight_version"] == str(int(before) + 2)
    bad = {**update, "weight_version": ["x"]}
    assert http_json(f"{server.url}/update_weights_from_disk", bad)[1]["error"]["param"] == "weight_version"


@pytest.mark.parametrize(
    "path", ["/init_weights_update_group", "/update_weights_from_distributed", "/update_weights_from_tensor"]
)
def test_weights_over_nccl_or_tensors_are_refused_by_name(server, path):
    status, body = http_json(f"{server.url}{path}", {})
    assert status == 400 and "/update_weights_from_disk" in body["error"]["message"], body
    assert body["error"]["message"].startswith(path), body
