"""`specroll serve` without HTTP, for a host with a transport of its own that calls the server in
process (verl's rollout actor, `specroll.integrations.verl`).

The same parts as the HTTP server: the engine in its thread (`EngineLoop`), built as `launch.py`
builds it, the `Service` that turns a call into requests under the exactness contract's keys, and the
same control (pause, abort, weight swaps between forwards). A body given to `generate` is parsed as
/inference/v1/generate parses it, so a choice drawn here equals the one that route draws for the same
body, to the bit. Nothing here imports FastAPI or uvicorn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Mapping

from specroll.engine.spec import EngineSpec
from specroll.serve.build import build_service
from specroll.serve.engine_loop import EngineLoop
from specroll.serve.generate_call import parse_skyrl_generate
from specroll.serve.service import Generation
from specroll.serve.state import ServeOptions, ServeState
from specroll.serve.weight_swap import swap_weights

WeightsSource = Mapping[str, Any] | str | Path  # a state dict (names as the checkpoint's) or a directory


class LocalServer:
    """One engine served in process; `start` must run on the event loop the calls come from."""

    def __init__(self, spec: EngineSpec, options: ServeOptions) -> None:
        self.spec = spec
        self.state = ServeState(options)

    async def start(self) -> None:
        """Build the engine in its thread; return once it serves (raise what building it raised)."""
        loop = asyncio.get_running_loop()
        engine_loop = EngineLoop(loop, self.state.metrics)
        self.state.engine_loop = engine_loop
        built = loop.create_future()
        services: list[Any] = []

        def build() -> Any:
            service, engine = build_service(self.spec, self.state, engine_loop)
            services.append(service)
            return engine

        engine_loop.start(build, lambda engine: built.set_result(services[0]), built.set_exception)
        self.state.service = await built

    def stop(self) -> None:
        if self.state.engine_loop is not None:
            self.state.engine_loop.stop()

    @property
    def weight_version(self) -> int:
        return self.state.engine_loop.weight_version

    async def generate(self, body: dict) -> Generation:
        """Draw the choices of one /inference/v1/generate body; returns once every one has ended (an
        abort ends them with their partial tokens). Cancelling the caller aborts them."""
        state = self.state
        call = parse_skyrl_generate(body, state.limits)
        generation = state.service.start(call)
        names = state.track(generation, f"local-{id(generation)}", generation.call.client_id)
        try:
            while not generation.is_finished:
                await generation.wait()
        except asyncio.CancelledError:
            state.service.abort(generation)
            raise
        finally:
            state.untrack(names)
        await self._score(generation)
        return generation

    async def _score(self, generation: Generation) -> None:
        """Alternatives (`logprobs` 2-20) and prompt scores come from a scoring forward, as over HTTP."""
        call = generation.call
        if call.top_logprobs or call.prompt_logprobs is not None:
            from specroll.serve.scoring import score_choices

            loop = self.state.engine_loop
            await loop.call(lambda: score_choices(loop.engine, call, generation.choices))

    async def abort(self, client_id: str) -> int:
        """End the choices of the generation the client named `client_id`; how many were running."""
        generation = self.state.generations.get(client_id)
        if generation is None:
            return 0
        running = sum(not c.is_finished for c in generation.choices)
        self.state.service.abort(generation)
        return running

    async def abort_all(self) -> int:
        loop = self.state.engine_loop
        return await loop.call(loop.abort_all)

    async def pause(self, mode: str) -> None:
        """vLLM's /pause: `keep` holds running requests in place, `abort` ends them, `wait` lets them end."""
        loop = self.state.engine_loop
        await loop.call(lambda: loop.pause(mode))
        if mode == "wait":
            await loop.drained()

    async def resume(self) -> None:
        await self.state.engine_loop.call(self.state.engine_loop.resume)

    async def load_weights(self, source: WeightsSource, name: str | None = None) -> int:
        """New weights between forwards, from a state dict or a safetensors directory; the new version."""
        if isinstance(source, (str, Path)):
            from specroll.model.loader import load_state_dict

            source = await asyncio.to_thread(load_state_dict, Path(source))
        return await swap_weights(self.state, source, name)
