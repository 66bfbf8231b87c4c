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

from specroll.engine.spec import EngineSpec
from specroll.serve.app import build_app
from specroll.serve.build import build_service
from specroll.serve.engine_loop import EngineLoop
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
