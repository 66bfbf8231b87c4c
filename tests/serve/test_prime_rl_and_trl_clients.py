"""prime-rl's and TRL's clients against `specroll serve`.

TRL (1.16, installed) is driven through its own `trl.generation.vllm_client.VLLMClient`: /health,
/v1/models, /server_info, /get_world_size, `generate` (/v1/completions with token ids, top-k logprobs),
`get_sequence_logprobs` (prompt_logprobs) and `reset_prefix_cache`. Its weight sync goes over NCCL: its
GRPOTrainer's first call in server mode, `init_communicator`, reads /server_info?config_format=json's
`vllm_config.weight_transfer_config`, which is null here, and stops there with TRL's own message; the
NCCL routes after it are refused by name. In one process, TRL runs on specroll through
`specroll.integrations.trl`'s `rollout_func` instead. The client refuses to start without vLLM
installed, so that one import check is patched out.

prime-rl's own rollout client (PyPI `renderers`) runs in tests/serve/test_prime_rl_client.py; here its
orchestrator's admin payloads (`prime_rl/orchestrator/client.py`), written from that code: POST
/inference/v1/generate {"token_ids", "sampling_params"}, POST /pause and /resume, POST /update_weights
{"weight_dir": DIR, "mode": "full"}, and vLLM's options on /inference/v1/generate (`logprobs: k`,
`flat_logprobs`, `prompt_logprobs`)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import SMALL_SERVER, http_json, module_server, perturbed_copy  # noqa: E402

PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from module_server(tmp_path_factory, "clients", SMALL_SERVER)


@pytest.fixture(scope="module")
def trl_client(server):
    from unittest import mock

    from trl.generation import vllm_client

    with mock.patch.object(vllm_client, "is_vllm_available", return_value=True):
        client = vllm_client.VLLMClient(base_url=server.url)
    yield client
    client.session.close()


def test_trl_client_generates_with_top_logprobs(trl_client):
    assert trl_client.get_server_info()["parallel_config"]["world_size"] == 1
    assert trl_client.get_world_size() == 1
    out = trl_client.generate(
        [PROMPT, PROMPT[:2]], n=2, max_tokens=8, logprobs=3, generation_kwargs={"seed": 4}
    )
    assert out["prompt_ids"] == [PROMPT, PROMPT[:2]] and len(out["completion_ids"]) == 4
    for ids, logprobs, token_ids in zip(out["completion_ids"], out["logprobs"], out["logprob_token_ids"]):
        assert len(logprobs) == len(ids) and all(3 <= len(row) <= 4 for row in logprobs)
        assert all(t in row for t, row in zip(ids, token_ids))  # the sampled token is always listed
        assert all(row == sorted(row, reverse=True) for row in logprobs)
    trl_client.reset_prefix_cache()


def test_trl_sequence_logprobs_are_the_sampled_ones(trl_client):
    out = trl_client.generate(
        [PROMPT], max_tokens=10, temperature=0.8, logprobs=0, generation_kwargs={"seed": 2}
    )
    completion, sampled = out["completion_ids"][0], [row[0] for row in out["logprobs"][0]]
    scored = trl_client.get_sequence_logprobs(
        [PROMPT + completion], [len(PROMPT)], top_logprobs=5, temperature=0.8
    )
    assert [row[0] for row in scored["actual_logprobs"][0]] == sampled  # to the bit
    assert all(len(row) == 5 and row == sorted(row, reverse=True) for row in scored["logprobs"][0])


def test_trl_weight_sync_stops_at_its_first_call_with_the_reason(trl_client):
    config = trl_client.get_server_info()
    assert config["weight_transfer_config"] is None
    assert config["model_config"]["logprobs_mode"] == "processed_logprobs"  # no warning from GRPOTrainer
    with pytest.raises(RuntimeError, match="has no weight-transfer engine"):
        trl_client.init_communicator(device="cuda")  # before any rendezvous: nothing hangs


def test_trl_weight_sync_over_nccl_is_refused_by_name(server):
    status, body = http_json(f"{server.url}/init_weight_transfer_engine", {"init_info": {}})
    assert status == 400 and "/update_weights" in body["error"]["message"], body
    assert "specroll.integrations.trl" in body["error"]["message"]
    nccl = {"update_info": {"names": ["lm_head.weight"], "dtype_names": ["float32"], "shapes": [[1, 1]]}}
    status, body = http_json(f"{server.url}/update_weights", nccl)  # TRL's update_named_params
    message = body["error"]["message"]
    assert status == 400 and message.startswith("/update_weights with update_info.names"), body
    assert "specroll.integrations.trl" in message and '{"weight_dir": DIR}' in message


def test_prime_rl_generate_pause_resume_and_update(server, tmp_path):
    from specroll.rollout import DEFAULT_MODEL

    def generate(temperature: float) -> list[int]:
        payload = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 12, "temperature": temperature,
                                                             "logprobs": 1, "seed": 3}}  # fmt: skip
        status, body = http_json(f"{server.url}/inference/v1/generate", payload)
        assert status == 200, body
        choice = body["choices"][0]
        assert all(math.isfinite(e["logprob"]) for e in choice["logprobs"]["content"])
        return choice["token_ids"]

    before = generate(0.0)
    assert http_json(f"{server.url}/pause", {})[0] == 200
    assert http_json(f"{server.url}/resume", {})[0] == 200
    weights = perturbed_copy(DEFAULT_MODEL, tmp_path / "step_1")
    status, body = http_json(f"{server.url}/update_weights", {"weight_dir": str(weights)})
    assert status == 200 and body["success"] is True, body
    assert generate(0.0) != before


def _generate(url: str, sampling: dict, prompt: list[int] = PROMPT) -> dict:
    status, body = http_json(
        f"{url}/inference/v1/generate", {"token_ids": prompt, "sampling_params": sampling}
    )
    assert status == 200, body
    return body


def test_generate_names_tokens_as_prime_rls_client_checks(server):
    choice = _generate(server.url, {"max_tokens": 8, "logprobs": 1, "seed": 3})["choices"][0]
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert [e["token_id"] for e in entries] == choice["token_ids"]  # SkyRL's field stays
    assert all(e["top_logprobs"] == [] for e in entries)  # 1: the sampled token alone, no second forward


def test_generate_top_logprobs_are_the_engines_numbers(server):
    sampling = {"max_tokens": 10, "temperature": 0.7, "seed": 5, "logprobs": 4, "flat_logprobs": True}
    choice = _generate(server.url, sampling)["choices"][0]
    completion = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0.7, "seed": 5, "logprobs": 4}
    reference = http_json(f"{server.url}/v1/completions", {**completion, "return_tokens_as_token_ids": True})
    expected = reference[1]["choices"][0]["logprobs"]
    for entry, token, value, top in zip(
        choice["logprobs"]["content"],
        expected["tokens"],
        expected["token_logprobs"],
        expected["top_logprobs"],
    ):
        assert entry["token"] == token and entry["logprob"] == value  # the same draw, to the bit
        alternatives = {a["token"]: a["logprob"] for a in entry["top_logprobs"]}
        assert len(alternatives) == 4 and alternatives == {k: v for k, v in top.items() if k in alternatives}
        ranked = [a["logprob"] for a in entry["top_logprobs"]]
        assert ranked == sorted(ranked, reverse=True)
        assert [a["rank"] for a in entry["top_logprobs"]] == [1, 2, 3, 4]  # vLLM's shape
        assert entry["rank"] > 4 or alternatives[entry["token"]] == entry["logprob"]


def test_generate_prompt_logprobs_of_a_sampled_output_are_its_logprobs(server):
    sampling = {"max_tokens": 10, "temperature": 0.7, "seed": 6, "logprobs": 0}
    drawn = _generate(server.url, sampling)["choices"][0]
    tokens, reported = drawn["token_ids"], [e["logprob"] for e in drawn["logprobs"]["content"]]
    scored = _generate(
        server.url, {"max_tokens": 1, "temperature": 0.7, "prompt_logprobs": 2}, PROMPT + tokens
    )
    rows = scored["prompt_logprobs"]
    assert rows[0] is None and len(rows) == len(PROMPT) + len(tokens)
    assert [rows[len(PROMPT) + i][str(t)]["logprob"] for i, t in enumerate(tokens)] == reported


@pytest.mark.parametrize(
    "sampling,param",
    [({"logprobs": 21}, "sampling_params.logprobs"),
     ({"prompt_logprobs": 21}, "sampling_params.prompt_logprobs"),
     ({"logprobs": 3, "stream": True}, "sampling_params.logprobs"),
     ({"flat_logprobs": "yes"}, "sampling_params.flat_logprobs")],
)  # fmt: skip
def test_generate_logprob_options_refused_by_name(server, sampling, param):
    status, body = http_json(
        f"{server.url}/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": sampling}
    )
    assert status == 400 and body["error"]["param"] == param, body


def test_prime_rl_delta_update_is_refused_by_name(server, tmp_path):
    status, body = http_json(f"{server.url}/update_weights", {"weight_dir": str(tmp_path), "mode": "delta"})
    assert status == 400 and body["error"]["param"] == "mode", body
