"""What every route reads: the service once the model is loaded, the server's limits and options."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specroll.serve.engine_loop import EngineLoop
from specroll.serve.errors import ApiError
from specroll.serve.prometheus import ServeMetrics
from specroll.serve.generate_call import Limits


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
    generations: dict[str, Any] = field(default_factory=dict)  # response id -> running `Generation`

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
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(f"the body is not valid JSON ({err})", None, 400) from None
