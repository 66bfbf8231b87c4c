"""Every route an RL framework calls that `specroll serve` does not offer answers 400 (never 404, which
prime-rl retries for a LoRA load, nor 5xx, which TRL's client retries) with an error naming the route and
what to do instead. The table is written from the frameworks' clients, not from the server's list, so a
route dropped from the server fails here. No model is loaded: a refusal needs no engine."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from specroll.serve.app import build_app
from specroll.serve.state import ServeOptions, ServeState

DISK = "/update_weights"  # every alternative names the filesystem update
TRL = "specroll.integrations.trl"
# (who calls it, route, the words the answer must hold besides the route and DISK)
CALLED = [
    ("TRL 1.16 VLLMClient.init_communicator", "/init_weight_transfer_engine", TRL),
    ("vLLM / SkyRL start_weight_update", "/collective_rpc", TRL),
    ("prime-rl init_nccl_broadcast (NCCL, NIXL)", "/init_broadcaster", TRL),
    ("slime / SGLang", "/init_weights_update_group", TRL),
    ("slime / SGLang", "/destroy_weights_update_group", TRL),
    ("slime / SGLang", "/update_weights_from_distributed", TRL),
    ("slime / SGLang", "/update_weights_from_tensor", TRL),
    ("AReaL", "/areal_init_weights_update_group", TRL),
    ("AReaL 1.0 VLLMBackend.build_distributed_weight_update_requests", "/areal_set_update_weight_meta", TRL),
    ("AReaL", "/areal_update_weights_xccl", TRL),
    ("prime-rl load_lora_adapter", "/load_lora_adapter", "LoRA"),
    ("prime-rl unload_lora_adapter", "/v1/unload_lora_adapter", "LoRA"),
    ("prime-rl (SGLang backend)", "/unload_lora_adapter", "LoRA"),
    ("vLLM / TRL experimental", "/v1/load_lora_adapter", "LoRA"),
    ("SkyRL", "/skyrl/v1/load_lora_adapter", "LoRA"),
    ("AReaL", "/areal_update_weights_lora", "LoRA"),
    ("AReaL 1.0 (LoRA over XCCL)", "/areal_set_update_weight_meta_lora", "LoRA"),
    ("AReaL 1.0 (LoRA over XCCL)", "/areal_update_weights_lora_xccl", "LoRA"),
    ("prime-rl stage_weights", "/stage", "full checkpoint"),
    ("prime-rl stage_weights (chunked)", "/stage_chunk", "full checkpoint"),
    ("prime-rl stage_weights (chunked)", "/stage_finalize", "full checkpoint"),
    ("prime-rl stage_weights (streaming)", "/stage_stream_init", "full checkpoint"),
    ("prime-rl stage_weights (streaming)", "/stage_stream_chunk", "full checkpoint"),
    ("prime-rl stage_weights (streaming)", "/stage_stream_finalize", "full checkpoint"),
    ("prime-rl commit_weights", "/commit", "full checkpoint"),
    ("prime-rl reload_weights", "/reload_weights", "original checkpoint"),
]


@pytest.fixture(scope="module")
def client():
    options = ServeOptions(model_name="m", model_aliases=frozenset({"m"}))
    with TestClient(build_app(ServeState(options))) as client:  # no lifespan: no engine is built
        yield client


@pytest.mark.parametrize("caller,route,words", CALLED, ids=[route for _, route, _ in CALLED])
def test_each_refused_route_names_itself_and_the_alternative(client, caller, route, words):
    answer = client.post(route, json={})
    assert answer.status_code == 400, (caller, answer.status_code, answer.text)
    message = answer.json()["error"]["message"]
    assert message.startswith(f"{route}: "), message
    assert DISK in message and words in message, message
