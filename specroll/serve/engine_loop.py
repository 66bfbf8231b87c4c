"""The engine in its own thread: continuous batching across HTTP requests.

The event loop never waits on a forward. It hands the engine thread work through a thread-safe inbox
(`submit`, `abort`, `call`); the thread drains the inbox between forwards (so requests join the running
batch, and weights change, only there), runs one `Engine.iterate`, and hands every request's new tokens
back in one `loop.call_soon_threadsafe` a forward.

Pausing (vLLM's /pause): `keep` stops forwards with the running requests kept in place; `abort` ends
them (their partial tokens, finish_reason abort); `wait` lets them finish first. While paused, new
requests are held and join on resume.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

from specroll.engine.request import Request
from specroll.serve.prometheus import ServeMetrics

log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 0.5  # how long an idle engine thread sleeps on its inbox before looking again


@dataclass(frozen=True)
class Emission:
    """What one forward gave a request: its new tokens, and its end."""

    token_ids: list[int]
    logprobs: list[float]
    weight_version: int
    finish_reason: str | None = None  # stop | length | abort | error, once it ended
    error: str | None = None


Sink = Callable[[Emission], None]  # called on the event loop


@dataclass
class _Live:
    request: Request
    sink: Sink
    num_sent: int  # output tokens already handed back (a continued request starts at its partial output)


class EngineLoop:
    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: ServeMetrics) -> None:
        self.loop = loop
        self.engine: Any = None  # set by `start` once built
        self.weight_version = 0
        self.live: dict[int, _Live] = {}
        self.held: list[tuple[Request, Sink]] = []  # submitted while paused
        self.paused = False
        self.draining = False  # pause(wait): running requests finish, new ones are held
        self.metrics = metrics
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._drained: list[asyncio.Future] = []
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ----- the event loop's side

    def start(self, build: Callable[[], Any], on_ready: Callable[[Any], None], on_error) -> None:
        """Build the engine in the engine thread (torch's threads are set where forwards run), then run."""
        self._thread = threading.Thread(
            target=self._main, args=(build, on_ready, on_error), name="engine", daemon=True
        )
        self._thread.start()

    def submit(self, requests: list[Request], sinks: list[Sink]) -> None:
        self._inbox.put(lambda: self._admit(requests, sinks))

    def load(self) -> tuple[int, int]:
        """(running, waiting) requests; waiting counts those queued in the engine and those a pause holds."""
        if self.engine is None:
            return 0, len(self.held)
        return self.engine.num_running, self.engine.num_waiting + len(self.held)

    def abort(self, request_ids: list[int]) -> None:
        self._inbox.put(lambda: self._abort(request_ids))

    def call(self, fn: Callable[[], Any]) -> asyncio.Future:
        """Run `fn` in the engine thread between forwards; its result (or error) comes back as a future."""
        future = self.loop.create_future()

        def run() -> None:
            try:
                result = fn()
            except Exception as err:  # handed to the caller
                self._to_loop(_fail_future, future, err)
            else:
                self._to_loop(_set_future, future, result)

        self._inbox.put(run)
        return future

    def drained(self) -> asyncio.Future:
        """A future done once no request runs (for pause(wait))."""
        future = self.loop.create_future()
        self._inbox.put(lambda: (self._drained.append(future), self._check_drained()))
        return future

    def stop(self) -> None:
        self._stopping = True
        self._inbox.put(lambda: None)
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ----- control, run in the engine thread (through `call`)

    def pause(self, mode: str) -> None:
        if mode == "abort":
            self.abort_all()
        if mode == "wait":
            self.draining = True
        else:
            self.paused = True

    def resume(self) -> None:
        self.paused = self.draining = False
        held, self.held = self.held, []
        for request, sink in held:
            self._add(request, sink)

    def abort_all(self) -> int:
        """End every request, running or held by a pause (finish_reason abort, partial tokens)."""
        ids = [*self.live, *(r.request_id for r, _ in self.held)]
        self._abort(ids)
        return len(ids)

    def abort_all_soon(self) -> None:
        """`abort_all` at the engine thread's next look at its inbox (safe from a signal handler)."""
        self._inbox.put(self.abort_all)

    # ----- the engine thread

    def _main(self, build, on_ready, on_error) -> None:
        try:
            self.engine = build()
        except Exception as err:
            log.exception("building the engine failed")
            self._to_loop(on_error, err)
            return
        self._to_loop(on_ready, self.engine)
        while not self._stopping:
            self._drain(block=not self._can_run)
            if self._can_run and not self._stopping:
                self._step()

    @property
    def _can_run(self) -> bool:
        return not self.paused and self.engine.has_unfinished

    def _drain(self, block: bool) -> None:
        try:
            work = self._inbox.get(timeout=IDLE_WAIT_SECONDS) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            work()
            try:
                work = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _step(self) -> None:
        running = [live.request for live in self.live.values()]
        try:
            finished = self.engine.iterate()
        except Exception:  # a failed forward ends what ran; the server keeps serving
            log.exception("a forward failed; its requests end with finish_reason abort")
            self._abort([r.request_id for r in running])
            return
        self.metrics.absorb(self.engine.telemetry)
        done = {r.request_id for r in finished}
        self._hand_back([self.live[i] for i in list(self.live) if i in done or self._has_new(self.live[i])])
        self._check_drained()

    def _has_new(self, live: _Live) -> bool:
        return live.request.num_output_tokens > live.num_sent

    def _hand_back(self, lives: list[_Live], reason: str | None = None) -> None:
        """Send each request its tokens since the last hand-back; forget the ones that ended."""
        deliveries = []
        for live in lives:
            r = live.request
            end = reason or r.finish_reason
            emission = Emission(
                r.output_token_ids[live.num_sent :],
                r.output_logprobs[live.num_sent :],
                self.weight_version,
                end,
                r.error,
            )
            live.num_sent = r.num_output_tokens
            deliveries.append((live.sink, emission))
            if end is not None:
                self.live.pop(r.request_id, None)
        if deliveries:
            self._to_loop(_deliver, deliveries)

    def _admit(self, requests: list[Request], sinks: list[Sink]) -> None:
        for request, sink in zip(requests, sinks):
            if self.paused or self.draining:
                self.held.append((request, sink))
            else:
                self._add(request, sink)

    def _add(self, request: Request, sink: Sink) -> None:
        live = _Live(request, sink, request.num_output_tokens)
        try:
            self.engine.add_request(request)
        except ValueError as err:
            request.fail(str(err))
            self._hand_back([live])
            return
        self.live[request.request_id] = live

    def _abort(self, request_ids: list[int]) -> None:
        ended = []
        for request_id in request_ids:
            live = self.live.get(request_id)
            if live is not None:
                self.engine.abort(live.request)
                ended.append(live)
        held = [(r, s) for r, s in self.held if r.request_id in set(request_ids)]
        self.held = [(r, s) for r, s in self.held if r.request_id not in set(request_ids)]
        ended += [_Live(r, s, r.num_output_tokens) for r, s in held]
        self._hand_back(ended, reason="abort")

    def _check_drained(self) -> None:
        if self.live or not self._drained:
            return
        if self.draining:
            self.draining, self.paused = False, True
        waiting, self._drained = self._drained, []
        for future in waiting:
            self._to_loop(_set_future, future, None)

    def _to_loop(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the event loop closed (shutting down): nobody is waiting
            pass


def _deliver(deliveries: list[tuple[Sink, Emission]]) -> None:
    for sink, emission in deliveries:
        sink(emission)


def _set_future(future: asyncio.Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail_future(future: asyncio.Future, err: Exception) -> None:
    if not future.done():
        future.set_exception(err)
