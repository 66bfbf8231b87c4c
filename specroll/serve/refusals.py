"""The routes RL frameworks call that `specroll serve` does not offer, and what to do instead.

Each answers 400 (never 404: prime-rl retries a LoRA load on 404 and 500, TRL's client retries 5xx) with
OpenAI's error shape, whose message names the route, what it would have done and the alternative.
Weights reach the server only as a safetensors directory on a filesystem it reads; nothing travels over
NCCL, NIXL or HTTP tensors, and there are no LoRA adapters."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request

from specroll.serve.errors import ApiError

DISK_UPDATE = (
    'save the weights as a safetensors directory the server can read and POST /update_weights {"weight_dir": '
    'DIR} (vLLM\'s {"update_info": {"path": DIR}}, SGLang\'s /update_weights_from_disk {"model_path": DIR} '
    'and AReaL\'s /areal_update_weights {"model_path": DIR} are the same)'
)
IN_PROCESS_TRL = (
    "TRL's GRPOTrainer runs on specroll in one process through specroll.integrations.trl "
    "(rollout_func), with no weight transfer at all"
)


@dataclass(frozen=True)
class Refusal:
    """Routes that would do `what`; the message says so and gives `instead`."""

    paths: tuple[str, ...]
    what: str
    instead: str
    param: str | None = None

    def message(self, path: str) -> str:
        return f"{path}: {self.what} is not available in specroll serve; instead, {self.instead}"


REFUSALS = (
    Refusal(
        ("/init_weight_transfer_engine", "/collective_rpc", "/init_broadcaster",
         "/init_weights_update_group", "/destroy_weights_update_group", "/update_weights_from_distributed",
         "/update_weights_from_tensor", "/areal_init_weights_update_group", "/areal_set_update_weight_meta",
         "/areal_update_weights_xccl"),
        "weight transfer over NCCL, NIXL or tensors in the request",
        f"{DISK_UPDATE}; {IN_PROCESS_TRL}",
    ),
    Refusal(
        ("/load_lora_adapter", "/unload_lora_adapter", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
         "/skyrl/v1/load_lora_adapter", "/areal_update_weights_lora", "/areal_set_update_weight_meta_lora",
         "/areal_update_weights_lora_xccl"),
        "serving LoRA adapters",
        f"merge the adapter into the base weights and {DISK_UPDATE}",
        "lora_name",
    ),
    Refusal(
        ("/stage", "/stage_chunk", "/stage_finalize", "/stage_stream_init", "/stage_stream_chunk",
         "/stage_stream_finalize", "/commit"),
        "staging a weight version (a full or delta checkpoint) to commit later",
        f"write the full checkpoint and {DISK_UPDATE}; it applies between two forwards",
    ),
    Refusal(
        ("/reload_weights",),
        "reloading the weights the server started with",
        f"{DISK_UPDATE} with DIR the original checkpoint",
    ),
)  # fmt: skip


def nccl_update_error(path: str) -> ApiError:
    """/update_weights given NCCL's tensor list (names, dtypes, shapes) instead of a directory."""
    return ApiError(REFUSALS[0].message(f"{path} with update_info.names"), "update_info")


def add_refusals(router: APIRouter) -> None:
    for refusal in REFUSALS:
        for path in refusal.paths:
            router.post(path)(_refuse(refusal))


def _refuse(refusal: Refusal):
    async def refuse(request: Request) -> dict:
        raise ApiError(refusal.message(request.url.path), refusal.param)

    return refuse
