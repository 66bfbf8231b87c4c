"""GET /server_info (SGLang's /get_server_info too): the server's settings in SGLang's names, which slime
compares with its own before using an external engine, and, under `vllm_config`, the tree vLLM's
dev-mode /server_info?config_format=json gives, which TRL's `VLLMClient` reads.

Every value is what this server does, not what a client hopes for: slime's start-up check
(`SGLangEngine._init_external`) asserts each setting it would have launched SGLang with equals ours, so a
mismatch (memory saver on, fp16 asked of a float32 model, routed experts) stops slime there, by name."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from specroll.serve.state import ServeState

router = APIRouter()


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(request: Request) -> dict[str, Any]:
    state: ServeState = request.app.state.serve
    options = state.options
    return {
        **sglang_settings(state),
        "world_size": 1,
        "model": options.model_name,
        "max_model_len": options.max_model_len,
        "weight_version": state.version_name(current_version(state)),
        "vllm_config": vllm_config(state),
    }


def current_version(state: ServeState) -> int:
    return state.engine_loop.weight_version if state.engine_loop is not None else 0


def _engine_config(state: ServeState) -> Any:
    loop = state.engine_loop
    return loop.engine.config if loop is not None and loop.engine is not None else None


def sglang_settings(state: ServeState) -> dict[str, Any]:
    """SGLang's `ServerArgs` fields that slime checks (all it launches SGLang with, less its skip list)
    and a client can read, answered for this server: one process, one device, no memory saver."""
    options, config = state.options, _engine_config(state)
    return {
        "model_path": options.model_name,
        "served_model_name": options.model_name,
        "context_length": options.max_model_len,
        "max_running_requests": config.max_batch_size if config is not None else None,
        "dtype": config.dtype if config is not None else None,  # SGLang's names: float32, bfloat16, float16
        "device": config.device if config is not None else None,
        "host": options.host,
        "port": options.port,
        "enable_memory_saver": False,  # /release_memory_occupation is not offered: the memory stays held
        "enable_return_routed_experts": False,  # dense models only: no router to replay
        "tp_size": 1,
        "dp_size": 1,
        "pp_size": 1,
        "ep_size": 1,
        "nnodes": 1,
        "node_rank": 0,
        "base_gpu_id": 0,  # SGLang's default; the engine uses the first device it sees
        "gpu_id_step": 1,
        "skip_server_warmup": True,  # nothing to warm: the first request builds what it needs
    }


def vllm_config(state: ServeState) -> dict[str, Any]:
    """vLLM's `VllmConfig` as JSON, the parts its clients read. `weight_transfer_config` is None: there
    is no NCCL weight-transfer engine, so TRL's `init_communicator` stops at once, before any rendezvous
    (its message: the server has no weight-transfer engine). `logprobs_mode` is processed_logprobs:
    the reported log-probabilities are log-softmax over the temperature-scaled logits, what TRL
    recomputes on its side, so TRL's importance-sampling check has nothing to warn about."""
    options, config = state.options, _engine_config(state)
    model = {
        "model": options.model_name,
        "served_model_name": options.model_name,
        "max_model_len": options.max_model_len,
        "dtype": config.dtype if config is not None else None,
        "logprobs_mode": "processed_logprobs",
    }
    parallel = {"tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 1}
    parallel["world_size"] = 1
    return {"model_config": model, "parallel_config": parallel, "weight_transfer_config": None}
