"""prime-rl's and TRL's clients against `specroll serve`.

TRL (1.16, installed) is driven through its own `trl.generation.vllm_client.VLLMClient`: /health,
/v1/models, /server_info, /get_world_size, `generate` (/v1/completions with token ids, top-k logprobs),
`get_sequence_logprobs` (prompt_logprobs) and `reset_prefix_cache`. Its weight sync goes over NCCL
(/init_weight_transfer_engine), which needs GPUs and is refused by name; in-process, TRL runs on
specroll through `specroll.integrations.trl`'s `rollout_func` instead. The client refuses to start
without vLLM installed, so that one import check is patched out.

prime-rl is not installed; its payloads follow prime-rl's orchestrator client (2025's `prime_rl/
orchestrator/client.py`: admin routes on the inference server), written from that code: POST
/inference/v1/generate {"token_ids", "sampling_params"}, POST /pause and /resume, POST /update_weights
{"weight_dir": DIR}."""

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


def test_trl_weight_sync_over_nccl_is_refused_by_name(server):
    status, body = http_json(f"{server.url}/init_weight_transfer_engine", {"init_info": {}})
    assert status == 400 and "/update_weights" in body["error"]["message"], body


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
