"""SGLang's control routes as slime drives an external engine (`--rollout-external-engine-addrs`):
a generating health check, cache flush, pause and continue, the weight version and the load. Server
info is `server_info.py`; weight updates from disk are `control.update_weights`; aborts are
`control.abort_requests`."""

from __future__ import annotations

import asyncio
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from specroll.engine.request import SamplingParams
from specroll.serve.control import pause
from specroll.serve.errors import ApiError
from specroll.serve.generate_call import GenerateCall
from specroll.serve.server_info import current_version
from specroll.serve.state import read_json, ready_state

HEALTH_GENERATE_SECONDS = 20.0
SGLANG_PAUSE_MODES = {"abort": "abort", "in_place": "keep", "retract": "keep"}  # SGLang's -> vLLM's
router = APIRouter()


@router.get("/health_generate")
async def health_generate(request: Request) -> PlainTextResponse:
    """One token drawn end to end (SGLang's check that the engine still generates); while paused the
    engine is idle by request, so it answers at once."""
    state = ready_state(request)
    if state.engine_loop.paused or state.engine_loop.draining:
        return PlainTextResponse("paused")
    call = GenerateCall(prompts=((0,),), continue_from=(None,), params=SamplingParams(max_tokens=1))
    generation = state.service.start(call)
    try:
        async with asyncio.timeout(HEALTH_GENERATE_SECONDS):
            while not generation.is_finished:
                await generation.wait()
    except TimeoutError:
        state.service.abort(generation)
        raise ApiError("the engine drew no token in time", None, 503, "server_error") from None
    return PlainTextResponse("ok")


@router.get("/flush_cache")
@router.post("/flush_cache")
async def flush_cache(request: Request) -> PlainTextResponse:
    """The engine keeps no prefix cache across requests: nothing to flush."""
    ready_state(request)
    return PlainTextResponse("Cache flushed.")


@router.post("/pause_generation")
async def pause_generation(request: Request) -> dict:
    state = ready_state(request)
    body = await read_json(request, state.options.max_body_bytes)
    mode = body.get("mode", "abort") if isinstance(body, dict) else "abort"
    if mode not in SGLANG_PAUSE_MODES:
        raise ApiError(f"mode: must be one of {', '.join(SGLANG_PAUSE_MODES)}, got {mode!r}", "mode")
    return await pause(state, SGLANG_PAUSE_MODES[mode])


@router.post("/continue_generation")
async def continue_generation(request: Request) -> dict:
    state = ready_state(request)
    await state.engine_loop.call(state.engine_loop.resume)
    return {"success": True, "message": "continued"}


@router.get("/get_weight_version")
async def weight_version(request: Request) -> dict:
    """The weights' version as slime named it with the update (`weight_version`), else the count."""
    state = ready_state(request)
    return {"weight_version": state.version_name(current_version(state))}


@router.get("/v1/loads")
async def loads(request: Request) -> dict:
    state = ready_state(request)
    running, waiting = state.engine_loop.load()
    row = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting}
    return {"loads": [row], **{k: v for k, v in row.items() if k != "dp_rank"}}
