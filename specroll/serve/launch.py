"""Starting and stopping the server: bind first and answer /health at once, build the engine in its
thread, print the ready line; on SIGTERM refuse new work, end in-flight choices (abort, with their
partial tokens) and exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import sys
from dataclasses import replace
from typing import Any

import uvicorn

from specroll.engine.memory import KvMemory, available_bytes, cache_shape, kv_bytes_per_slot, size_text
from specroll.engine.spec import EngineSpec
from specroll.serve.app import build_app
from specroll.serve.engine_loop import EngineLoop
from specroll.serve.generate_call import Limits
from specroll.serve.state import ServeOptions, ServeState


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None) -> None:
    if not is_loopback(host) and not api_key:
        raise ValueError(f"--host {host} is reachable from other machines: give --api-key too")


def build_service(spec: EngineSpec, state: ServeState, engine_loop: EngineLoop) -> Any:
    """In the engine thread: torch's threads, the engine (its cache sized for --max-model-len) and the
    tokenizer."""
    from specroll.engine.factory import build_engine
    from specroll.engine.threads import apply_threads
    from specroll.serve.service import Codec, Service
    from specroll.tokenizer import load_tokenizer

    apply_threads(spec)
    options = state.options
    config = spec.target_config()
    max_model_len = min(options.max_model_len, config.max_position_embeddings)
    spec = replace(spec, max_tokens=max_model_len)
    if options.kv_memory is not None:
        spec = sized_by_budget(spec, config, options.kv_memory)
        max_model_len = spec.max_tokens
    engine = build_engine(spec, 0, fit_memory=options.kv_memory is None)
    print(cache_line(engine.config, config), flush=True)
    state.options = replace(options, max_model_len=max_model_len)
    state.limits = Limits(
        vocab_size=config.vocab_size,
        max_model_len=max_model_len,
        max_tokens=min(options.max_tokens, max_model_len - 1),
        max_n=options.max_n,
        model_names=options.model_aliases | {options.model_name},
        served_name=options.model_name,
    )
    codec = Codec(load_tokenizer(spec.model_dir))
    return Service(codec, engine_loop, state.metrics), engine


def sized_by_budget(spec: EngineSpec, config, kv_memory: KvMemory) -> EngineSpec:
    """The spec with as many slots as `kv_memory` holds at the asked context, or, where not one slot
    fits, one slot and the context that fits."""
    engine = spec.engine
    per_position = kv_bytes_per_slot(config, 1, engine.cache_dtype)
    extra = engine.max_draft + 1  # a cache slot holds max_model_len + max_draft + 1 positions
    budget = kv_memory.budget(available_bytes(engine.device))
    slots, positions = cache_shape(budget, per_position, engine.max_batch_size, spec.max_tokens + extra)
    if positions - extra < 2:
        raise ValueError(
            f"--kv-memory: {size_text(budget)} holds {positions} positions of {per_position} bytes; "
            f"a context needs {extra + 2} at least"
        )
    return replace(spec, max_tokens=positions - extra, engine=replace(engine, max_batch_size=slots))


def cache_line(engine_config, config) -> str:
    """What the KV cache holds: its size, slots (requests at once) and positions a slot."""
    positions = engine_config.cache_capacity
    total = engine_config.max_batch_size * kv_bytes_per_slot(config, positions, engine_config.cache_dtype)
    return (
        f"specroll serve: KV cache {size_text(total)}: {engine_config.max_batch_size} slots x {positions} "
        f"positions (a context of {engine_config.max_model_len}; --kv-memory sets the budget)"
    )


class _Server(uvicorn.Server):
    """uvicorn, with SIGTERM ending in-flight choices first and the process exiting 0 after."""

    def __init__(self, config: uvicorn.Config, state: ServeState) -> None:
        super().__init__(config)
        self.serve_state = state

    def handle_exit(self, sig: int, frame) -> None:
        state = self.serve_state
        state.accepting = False
        if state.engine_loop is not None and state.engine_loop.engine is not None:
            state.engine_loop.abort_all_soon()
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:  # handled: uvicorn would raise it again after shutting down
            self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]


def serve(spec: EngineSpec, options: ServeOptions, host: str, port: int) -> int:
    check_exposure(host, options.api_key)
    state = ServeState(replace(options, host=host, port=port))
    failed: list[BaseException] = []

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loop = asyncio.get_running_loop()
        engine_loop = EngineLoop(loop, state.metrics)
        state.engine_loop = engine_loop
        built: dict[str, Any] = {}

        def build():
            built["service"], engine = build_service(spec, state, engine_loop)
            return engine

        def on_ready(engine) -> None:
            state.service = built["service"]
            print(f"specroll serve: ready ({spec.model_dir}, drafter {spec.drafter})", flush=True)

        def on_error(err: BaseException) -> None:
            state.load_error = str(err)
            failed.append(err)
            print(f"specroll serve: error: the model failed to load: {err}", file=sys.stderr, flush=True)
            server.should_exit = True

        engine_loop.start(build, on_ready, on_error)
        yield
        engine_loop.stop()

    app = build_app(state, lifespan)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30)
    server = _Server(config, state)
    print(f"specroll serve: listening on http://{host}:{port} (loading {spec.model_dir})", flush=True)
    server.run()
    return 1 if failed or not server.started else 0
