"""The control plane under vLLM's names, with SkyRL's, SGLang's and AReaL's aliases: pause and resume,
aborts, sleep and wake-up, prefix-cache reset, weight updates from a safetensors directory (between
forwards only), weight info and world size."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from specroll.serve.errors import ApiError
from specroll.serve.refusals import add_refusals, nccl_update_error
from specroll.serve.state import ServeState, read_json, ready_state
from specroll.serve.weight_swap import swap_weights

PAUSE_MODES = ("keep", "abort", "wait")
router = APIRouter()


async def _body(request: Request, state: ServeState) -> dict:
    body = await read_json(request, state.options.max_body_bytes)
    if not isinstance(body, dict):
        raise ApiError("the body must be a JSON object")
    return body


async def pause(state: ServeState, mode: str) -> dict:
    if mode not in PAUSE_MODES:
        raise ApiError(f"mode: must be one of {', '.join(PAUSE_MODES)}, got {mode!r}", "mode")
    loop = state.engine_loop
    await loop.call(lambda: loop.pause(mode))
    if mode == "wait":
        await loop.drained()
    return {"status": "paused", "mode": mode, "success": True, "message": f"paused ({mode})"}


@router.post("/pause")
async def pause_route(request: Request, mode: str = "abort") -> dict:
    state = ready_state(request)
    body = await _body(request, state)
    return await pause(state, body.get("mode", mode))


@router.post("/areal_pause_generation")
async def areal_pause(request: Request) -> dict:
    return await pause(ready_state(request), "abort")


@router.post("/resume")
@router.post("/areal_continue_generation")
async def resume(request: Request) -> dict:
    state = ready_state(request)
    await state.engine_loop.call(state.engine_loop.resume)
    state.sleeping = False
    return {"status": "resumed", "success": True, "message": "resumed"}


@router.get("/is_paused")
async def is_paused(request: Request) -> dict:
    loop = ready_state(request).engine_loop
    return {"is_paused": loop.paused or loop.draining}


@router.post("/abort_requests")
@router.post("/abort_request")
async def abort_requests(request: Request) -> dict:
    """Abort the named requests (`request_ids`, SGLang's `rid`: response ids or the clients' own
    `request_id`/`rid`), or, with none named or `abort_all`, every running one."""
    state = ready_state(request)
    body = await _body(request, state)
    ids = _named_ids(body)
    if ids is None or body.get("abort_all"):
        count = await state.engine_loop.call(state.engine_loop.abort_all)
        return {"aborted": count, "success": True}
    generations = {id(g): g for g in (state.generations.get(i) for i in ids) if g is not None}
    for generation in generations.values():
        state.service.abort(generation)
    unfinished = sum(not c.is_finished for g in generations.values() for c in g.choices)
    return {"aborted": unfinished, "success": True}


def _named_ids(body: dict) -> list[str] | None:
    """The ids a body names under vLLM's or SGLang's field; None where it names none."""
    for name in ("request_ids", "rid", "request_id"):
        value = body.get(name)
        if value is None or value == "":
            continue
        ids = [value] if isinstance(value, str) else value
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(f"{name}: must be a request id or a list of them", name)
        return ids
    return None


@router.post("/sleep")
async def sleep(request: Request) -> dict:
    """Pause (keep) and report sleeping; on the CPU there is no device memory to hand back."""
    state = ready_state(request)
    await _body(request, state)
    await pause(state, "keep")
    state.sleeping = True
    return {"status": "sleeping"}


@router.post("/wake_up")
async def wake_up(request: Request) -> dict:
    state = ready_state(request)
    await _body(request, state)
    await state.engine_loop.call(state.engine_loop.resume)
    state.sleeping = False
    return {"status": "awake"}


@router.get("/is_sleeping")
async def is_sleeping(request: Request) -> dict:
    return {"is_sleeping": ready_state(request).sleeping}


@router.post("/reset_prefix_cache")
async def reset_prefix_cache(request: Request) -> dict:
    """The engine keeps no prefix cache across requests: nothing stale to drop."""
    state = ready_state(request)
    await _body(request, state)
    return {"success": True}


def _weights_dir(body: dict, path: str) -> str:
    info = body.get("update_info") if isinstance(body.get("update_info"), dict) else body
    if "names" in info:  # TRL's and vLLM's NCCL update: tensors follow over the group, not a directory
        raise nccl_update_error(path)
    mode = body.get("mode", "full")  # prime-rl's: a delta checkpoint holds only what changed
    if mode != "full":
        raise ApiError(f'mode: {mode!r} updates are not supported; give a full checkpoint ("full")', "mode")
    for name in ("model_path", "path", "weights_dir", "weight_dir", "load_path"):  # weight_dir: prime-rl's
        if isinstance(info.get(name), str):
            return info[name]
    where = "update_info." if info is not body else ""
    raise ApiError(
        f"{where}model_path: give the directory of the new weights (safetensors); specroll serve "
        "takes no tensors over NCCL, NIXL or HTTP",
        f"{where}model_path",
    )


def _version_name(body: dict) -> str | None:
    """The client's name for the new weights (slime's and SGLang's `weight_version`), if it gave one."""
    name = body.get("weight_version")
    if name is None:
        return None
    if isinstance(name, bool) or not isinstance(name, (str, int)) or str(name) == "":
        raise ApiError(f"weight_version: must be a non-empty string, got {name!r}", "weight_version")
    return str(name)


async def update_weights(state: ServeState, directory: str, name: str | None = None) -> dict:
    """Read the safetensors (refusing pickles) off the engine thread, then swap them in between forwards.
    The server counts versions itself (the drafters key their history by the count); `name` is what the
    client calls the new one, answered wherever SGLang answers a version (`ServeState.version_name`)."""
    from specroll.model.loader import load_state_dict

    try:
        weights = await asyncio.to_thread(load_state_dict, Path(directory))
    except (ValueError, FileNotFoundError) as err:
        raise ApiError(f"model_path: {err}", "model_path") from None
    try:
        version = await swap_weights(state, weights, name)
    except ValueError as err:
        raise ApiError(f"model_path: {err}", "model_path") from None
    answer = {"success": True, "message": f"weights from {directory}", "weight_version": version}
    return answer if name is None else {**answer, "weight_version": name}


@router.post("/update_weights")
@router.post("/areal_update_weights")
@router.post("/update_weights_from_disk")
async def update_weights_route(request: Request) -> dict:
    state = ready_state(request)
    body = await _body(request, state)
    return await update_weights(state, _weights_dir(body, request.url.path), _version_name(body))


@router.get("/weight_info")
async def weight_info(request: Request) -> dict:
    state = ready_state(request)
    loop = state.engine_loop

    def info() -> dict:
        from specroll.train.weights import state_sha256

        if loop.weight_version not in state.weights_sha256:
            state.weights_sha256[loop.weight_version] = state_sha256(loop.engine.state_dict())
        return {
            "weight_version": loop.weight_version,
            "weights_sha256": state.weights_sha256[loop.weight_version],
            "drafter_step": loop.engine.training_step,  # the version history drafting files responses under
        }

    return await loop.call(info)


@router.get("/get_world_size")
async def world_size(request: Request) -> dict[str, Any]:
    return {"world_size": 1}


@router.post("/start_weight_update")
@router.post("/finish_weight_update")
async def weight_update_bracket(request: Request) -> dict:
    """vLLM's brackets around a disk update: /update_weights applies one by itself, so nothing to do."""
    state = ready_state(request)
    await _body(request, state)
    return {"success": True}


@router.post("/finish_session")
async def finish_session(request: Request) -> dict:
    """SkyRL ends a trajectory's session (routing state in a router): this server keeps none."""
    ready_state(request)
    return {"success": True}


add_refusals(router)
