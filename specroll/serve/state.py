"""What every route reads: the service once the model is loaded, the server's limits and options."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specroll.serve.engine_loop import EngineLoop
from specroll.serve.errors import ApiError
from specroll.serve.prometheus import ServeMetrics
from specroll.serve.generate_call import Limits

if TYPE_CHECKING:
    from fastapi import Request
    from specroll.engine.memory import KvMemory


@dataclass
class ServeOptions:
    """`specroll serve`'s settings besides the engine's."""

    model_name: str  # the name responses give and `model` may use
    model_aliases: frozenset[str]
    api_key: str | None = None
    max_model_len: int = 4096
    max_tokens: int = 4096  # the most new tokens one choice may ask for
    max_n: int = 64
    max_body_bytes: int = 8 << 20
    kv_memory: KvMemory | None = None  # the KV cache budget; None: the slots that fit half the free memory
    host: str = "127.0.0.1"  # where it listens (SGLang's server info reports it; slime checks it)
    port: int = 8000


@dataclass
class ServeState:
    options: ServeOptions
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    engine_loop: EngineLoop | None = None
    service: Any = None  # `Service`, once the engine is built
    limits: Limits | None = None
    load_error: str | None = None
    accepting: bool = True  # False once SIGTERM came: new work is refused
    sleeping: bool = False
    weights_sha256: dict[int, str] = field(default_factory=dict)  # by weight version
    version_names: dict[int, str] = field(default_factory=dict)  # the client's name of a weight version
    generations: dict[str, Any] = field(default_factory=dict)  # response or client id -> running `Generation`

    def track(self, generation: Any, rid: str, client_id: str | None) -> tuple[str, ...]:
        """Name a running generation by its response id and the client's own id (vLLM's `request_id`,
        SGLang's `rid`), so either aborts it; returns the names for `untrack`."""
        names = (rid,) if client_id is None else (rid, client_id)
        for name in names:
            self.generations[name] = generation
        return names

    def version_name(self, version: int | None) -> str | None:
        """A weight version as SGLang answers it: the name the client gave with the update (slime's
        `weight_version`), else the server's own count."""
        return None if version is None else self.version_names.get(version, str(version))

    def untrack(self, names: tuple[str, ...]) -> None:
        for name in names:
            self.generations.pop(name, None)

    def ready(self) -> Any:
        """The service, or a 503 while loading, after a failed load or once shutting down."""
        if not self.accepting:
            raise ApiError("the server is shutting down", None, 503, "server_error")
        if self.service is None:
            message = (
                f"the model failed to load: {self.load_error}" if self.load_error else "the model is loading"
            )
            raise ApiError(message, None, 503, "server_error")
        return self.service


async def read_json(request, limit: int) -> Any:
    """The request's JSON body, within `limit` bytes (413 past it, 400 if not JSON)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the body exceeds the limit of {limit} bytes", None, 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(f"the body exceeds the limit of {limit} bytes", None, 413)
    if not body:
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(f"the body is not valid JSON ({err})", None, 400) from None
    except RecursionError:
        raise ApiError("the body's JSON is nested too deep to read", None, 400) from None
    if _SURROGATE_ESCAPE.search(body):
        _refuse_lone_surrogates(value)
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a \uD800-\uDFFF escape: maybe unpaired


def _refuse_lone_surrogates(value: Any) -> None:
    """JSON may escape half a UTF-16 pair; such a string is not text (no tokenizer can read it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ApiError("the body holds a lone surrogate (\\ud800-\\udfff): not valid text") from None


def ready_state(request: Request) -> ServeState:
    """The server's state behind a request to a control route, once the engine is up (else the
    refusal `ServeState.ready` raises)."""
    state: ServeState = request.app.state.serve
    state.ready()
    return state
