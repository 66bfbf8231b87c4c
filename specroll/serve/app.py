"""The HTTP application: the data-plane routes (OpenAI completions and chat, SkyRL's and SGLang's
generate, tokenize, models, health, metrics), the control routes (`control.py`), the API key and the
error shape. Every refusal is a 4xx in OpenAI's shape naming the field; nothing here waits on a forward."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from specroll.serve import control, responses, server_info, sglang_control
from specroll.serve.errors import ApiError
from specroll.serve.generate_call import (
    GenerateCall,
    parse_chat,
    parse_completion,
    parse_skyrl_generate,
    parse_sglang_generate,
)
from specroll.serve.service import Generation
from specroll.serve.state import ServeState, read_json

log = logging.getLogger(__name__)
DISCONNECT_POLL_SECONDS = 0.25


def build_app(state: ServeState, lifespan=None) -> FastAPI:
    app = FastAPI(title="specroll serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.serve = state
    app.include_router(control.router)
    app.include_router(sglang_control.router)
    app.include_router(server_info.router)
    _add_data_routes(app)
    _add_error_handlers(app)
    app.add_middleware(_KeyCheck, key=state.options.api_key)
    return app


class _KeyCheck:
    """Every endpoint but /health needs `Authorization: Bearer KEY` when the server has a key. Plain
    ASGI (not BaseHTTPMiddleware), so a handler still sees its client go away."""

    def __init__(self, app, key: str | None) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send) -> None:
        if self.key and scope["type"] == "http" and scope["path"] != "/health":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode(errors="replace") != f"Bearer {self.key}":
                error = ApiError(
                    "a valid API key is needed: Authorization: Bearer KEY", None, 401, "authentication_error"
                )
                await JSONResponse(error.body(), error.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(err.body(), err.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return JSONResponse(ApiError(f"{param}: {first.get('msg', 'invalid')}", param).body(), 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return JSONResponse(ApiError(str(err.detail), None, err.status_code).body(), err.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        message = str(err).encode("utf-8", "backslashreplace").decode()  # an error may quote bad text
        return JSONResponse(ApiError(f"internal error: {message}", None, 500, "server_error").body(), 500)


def _add_data_routes(app: FastAPI) -> None:
    state: ServeState = app.state.serve

    @app.get("/health")
    async def health() -> Response:
        if state.service is None:
            status = "failed" if state.load_error else "loading"
            return JSONResponse({"status": status, "error": state.load_error}, 503)
        return JSONResponse({"status": "ok", "weight_version": state.engine_loop.weight_version})

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(state.options)]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        loop = state.engine_loop
        running, waiting = loop.load() if loop is not None else (0, 0)
        version = loop.weight_version if loop is not None else 0
        return PlainTextResponse(state.metrics.render(running, waiting, version, state.options.model_name))

    for route in _GENERATE_ROUTES:
        _add_generate_route(app, state, route)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        service = state.ready()
        body = await read_json(request, state.options.max_body_bytes)
        if not isinstance(body, dict):
            raise ApiError("the body must be a JSON object")
        if isinstance(body.get("messages"), list):
            tokens = service.codec.encode_chat(body["messages"], body.get("chat_template_kwargs") or {})
        elif isinstance(body.get("prompt"), str):
            tokens = service.codec.encode_text(body["prompt"], bool(body.get("add_special_tokens", True)))
        else:
            raise ApiError("prompt: give the text to tokenize (or messages)", "prompt")
        strings = service.codec.hf.convert_ids_to_tokens(tokens) if body.get("return_token_strs") else None
        return {
            "count": len(tokens),
            "max_model_len": state.options.max_model_len,
            "tokens": tokens,
            "token_strs": strings,
        }

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict:
        service = state.ready()
        body = await read_json(request, state.options.max_body_bytes)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        vocab = state.limits.vocab_size
        if not isinstance(tokens, list) or not all(isinstance(t, int) and 0 <= t < vocab for t in tokens):
            raise ApiError(f"tokens: must be a list of token ids in 0..{vocab - 1}", "tokens")
        return {"prompt": service.codec.decode(tokens)}


def _model_card(options) -> dict[str, Any]:
    """vLLM's model card; `root` is the served name, never the checkpoint's path on this machine."""
    permission = {
        "id": f"modelperm-{options.model_name}",
        "object": "model_permission",
        "created": _STARTED,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": options.model_name,
        "object": "model",
        "created": _STARTED,
        "owned_by": "specroll",
        "root": options.model_name,
        "parent": None,
        "max_model_len": options.max_model_len,
        "permission": [permission],
    }


_STARTED = int(time.time())


@dataclass(frozen=True)
class GenerateRoute:
    """One generation endpoint: its path, how a body is parsed, how finished choices are rendered
    (`render(rid, model, call, choices, state)`), its response ids' prefix and its stream chunks'
    `object`."""

    path: str
    parse: Callable[[Any, ServeState], GenerateCall]
    render: Callable
    prefix: str
    chunk_kind: str


def _with_codec(render: Callable) -> Callable:
    """A renderer that needs the tokenizer, as a route's `render` (which is given the server's state)."""
    return lambda rid, model, call, choices, state: render(rid, model, call, choices, state.service.codec)


_GENERATE_ROUTES = (
    GenerateRoute(
        "/v1/completions",
        lambda b, s: parse_completion(b, s.limits, s.service.codec),
        _with_codec(responses.completion),
        "cmpl",
        "text_completion",
    ),
    GenerateRoute(
        "/v1/chat/completions",
        lambda b, s: parse_chat(b, s.limits, s.service.codec),
        _with_codec(responses.chat),
        "chatcmpl",
        "chat.completion.chunk",
    ),
    GenerateRoute(
        "/inference/v1/generate",
        lambda b, s: parse_skyrl_generate(b, s.limits),
        _with_codec(responses.skyrl_generate),
        "gen",
        "generate.chunk",
    ),
    GenerateRoute(
        "/generate",
        lambda b, s: parse_sglang_generate(b, s.limits, s.service.codec),
        lambda rid, model, call, choices, s: responses.sglang_generate(rid, call, choices, s.version_name),
        "sgl",
        "",
    ),
)


def _add_generate_route(app: FastAPI, state: ServeState, route: GenerateRoute) -> None:
    async def generate(request: Request) -> Response:
        return await _generate(
            request, state, lambda b: route.parse(b, state), route.render, route.prefix, route.chunk_kind
        )

    app.post(route.path)(generate)


async def _generate(
    request: Request,
    state: ServeState,
    parse: Callable[[Any], GenerateCall],
    render,
    prefix: str,
    chunk_kind: str,
) -> Response:
    service = state.ready()
    call = parse(await read_json(request, state.options.max_body_bytes))
    rid = f"{prefix}-{call.client_id or _random_id()}"  # vLLM's: cmpl-<the client's request_id>
    generation = service.start(call)
    call = generation.call  # a resent aborted choice continues under the seed that drew it
    names = state.track(generation, rid, call.client_id)
    model = call.model or state.options.model_name
    if call.stream:
        events = _stream(request, state, generation, _StreamHeader(rid, model, chunk_kind, names))
        return StreamingResponse(events, media_type="text/event-stream")
    try:
        if not await _follow(request, state, generation):
            return Response(status_code=499)
    finally:
        state.untrack(names)
    if call.top_logprobs or call.prompt_logprobs is not None:
        from specroll.serve.scoring import score_choices  # torch: only once the engine runs

        await state.engine_loop.call(
            lambda: score_choices(state.engine_loop.engine, call, generation.choices)
        )
    return JSONResponse(render(rid, model, call, generation.choices, state))


def _random_id() -> str:
    """16 hex digits, as vLLM's: unique across restarts and replicas, so a stale id aborts nothing."""
    return secrets.token_hex(8)


async def _follow(request: Request, state: ServeState, generation: Generation) -> bool:
    """Wait for every choice; False when the client went away first (its choices are aborted)."""
    while not generation.is_finished:
        if not await _next_arrival(request, state, generation):
            return False
    return True


async def _next_arrival(request: Request, state: ServeState, generation: Generation) -> bool:
    """Wait for the generation to move; False when the client went away first (its choices are
    aborted: a queued or paused request writes nothing that would notice)."""
    while True:
        try:
            await asyncio.wait_for(generation.wait(), DISCONNECT_POLL_SECONDS)
            return True
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                state.service.abort(generation)
                return False


class _StreamHeader:
    """What every chunk of one stream repeats (id, object, created, model), and the names the stream's
    generation is tracked under."""

    def __init__(self, rid: str, model: str, kind: str, names: tuple[str, ...]) -> None:
        self.rid, self.model, self.kind, self.names = rid, model, kind, names
        self.created = int(time.time())

    def chunk(self, index: int, row: dict) -> dict:
        return {**self.envelope(), "choices": [{"index": index, **row}]}

    def envelope(self) -> dict:
        return {"id": self.rid, "object": self.kind, "created": self.created, "model": self.model}


async def _stream(
    request: Request, state: ServeState, generation: Generation, header: _StreamHeader
) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format, one chunk a choice that moved, then (with
    `stream_options.include_usage`) one with the usage and no choices, then [DONE]. The last chunk
    carries `system_fingerprint`, as vLLM's."""
    try:
        async for chunk in _chunks(request, state, generation, header):
            yield _sse(chunk)
        yield "data: [DONE]\n\n"
    finally:
        state.untrack(header.names)
        if not generation.is_finished:  # the client went away mid-stream
            state.service.abort(generation)


async def _chunks(
    request: Request, state: ServeState, generation: Generation, header: _StreamHeader
) -> AsyncIterator[dict]:
    codec = state.service.codec
    call = generation.call
    sent = {c.index: (0, 0) for c in generation.choices}  # tokens, characters; (-1, -1): its last is out
    chat = header.kind == "chat.completion.chunk"
    fingerprint = {"system_fingerprint": responses.SYSTEM_FINGERPRINT}
    if chat:
        for c in generation.choices:
            yield _chat_opening(header, call, c, is_first=c is generation.choices[0])
    while True:
        finished = generation.is_finished
        for c in generation.choices:
            row = _choice_delta(codec, call, c, sent, chat, final=c.is_finished)
            if row is None:
                continue
            is_last = not call.include_usage and all(n < 0 for n, _ in sent.values())
            yield {**header.chunk(c.index, row), **(fingerprint if is_last else {})}
        if finished or not await _next_arrival(request, state, generation):
            break
    if call.include_usage:
        usage = responses.usage(generation.choices)
        yield {**header.envelope(), "choices": [], "usage": usage, **fingerprint}


def _chat_opening(header: _StreamHeader, call: GenerateCall, c, is_first: bool) -> dict:
    """A chat choice's first chunk: the assistant's role; the stream's first also vLLM's prompt fields."""
    row = {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    chunk = header.chunk(c.index, row)
    if is_first:
        chunk.update(responses.chat_prompt_fields(call, c))
    return chunk


def _choice_delta(codec, call: GenerateCall, c, sent: dict, chat: bool, final: bool) -> dict | None:
    num_tokens, num_chars = sent[c.index]
    if num_tokens < 0:  # its last chunk is out
        return None
    text = c.text
    hold = 0 if final else (max(map(len, call.stop)) - 1 if call.stop else 0)
    end = max(num_chars, len(text) - hold)
    while end > num_chars and text[end - 1] == "\ufffd" and not final:  # a character still being completed
        end -= 1
    new_ids, new_lps = c.token_ids[num_tokens:], c.logprobs[num_tokens:]
    if not new_ids and end == num_chars and not final:
        return None
    sent[c.index] = (-1, -1) if final else (len(c.token_ids), end)
    piece = text[num_chars:] if final else text[num_chars:end]
    row: dict[str, Any] = {"finish_reason": responses.finish_reason(c) if final else None}
    if final or not chat:  # vLLM's completion chunks carry it throughout, its chat chunks at the end
        row["stop_reason"] = c.stop_reason if final else None
    if chat:
        row["delta"] = {"content": piece}
        row["logprobs"] = responses.chat_logprobs(codec, call, new_ids, new_lps)
    else:
        row["text"] = piece
        row["logprobs"] = responses.completion_logprobs(codec, call, new_ids, new_lps, text[:num_chars])
        is_first = num_tokens == 0 and num_chars == 0
        row["prompt_token_ids"] = list(c.prompt_token_ids) if call.return_token_ids and is_first else None
    row["token_ids"] = list(new_ids) if call.return_token_ids else None
    if final:
        row.update(responses.replay_fields(call, c))
    return row


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"
