"""One worker of a multi-worker rollout: an engine that runs the coordinator's dispatches.

`advance` drops the requests that moved away, adds the new ones and iterates the engine until some
request finishes (or a time slice passes, so that progress reaches the coordinator often), then reports
every request's new tokens. The same class runs inside a Ray actor (`ray_pool`) and in the coordinator's
process (`inline_pool`). It builds its engine from a typed `EngineSpec` (`specroll.engine.factory`), the
same way a one-process rollout does.
"""

from __future__ import annotations

import time
from typing import Sequence

from specroll.cluster.work import Update, WorkerReport, WorkerTelemetry, WorkItem
from specroll.engine.factory import build_engine
from specroll.engine.threads import apply_threads
from specroll.engine.request import Request
from specroll.engine.spec import EngineSpec

REPORT_SECONDS = 0.5  # the longest a call runs without a dispatch ending


class EngineWorker:
    def __init__(self, index: int, spec: EngineSpec, longest_prompt: int) -> None:
        if not isinstance(spec, EngineSpec):
            raise TypeError(f"a worker builds its engine from an EngineSpec, got {type(spec).__name__}")
        apply_threads(spec)
        self.index = index
        self.engine = build_engine(spec, longest_prompt)
        self._live: dict[int, Request] = {}
        self._reported: dict[int, int] = {}  # request id -> output tokens already reported

    def ready(self) -> int:
        """Answers once the engine is built: a worker that cannot start fails here, by name."""
        return self.index

    def advance(
        self, items: Sequence[WorkItem], drop: Sequence[int] = (), max_seconds: float = REPORT_SECONDS
    ) -> WorkerReport:
        started = time.perf_counter()
        for request_id in drop:
            request = self._live.pop(request_id, None)
            if request is not None and not request.is_finished:
                self.engine.abort(request)
            self._reported.pop(request_id, None)
        refused = [update for item in items if (update := self._add(item)) is not None]
        while self.engine.has_unfinished:
            finished = self.engine.iterate()
            if finished or time.perf_counter() - started > max_seconds:
                break
        return WorkerReport(self.index, (*refused, *self._progress()), time.perf_counter() - started)

    def _add(self, item: WorkItem) -> Update | None:
        """Queue the dispatch; a request the engine refuses ends at once, with the engine's error."""
        request = item.to_request()
        try:
            self.engine.add_request(request)
        except ValueError as err:
            request.fail(str(err))
            return _update(request, request.num_output_tokens, ended=True)
        self._live[item.request_id] = request
        self._reported[item.request_id] = len(item.output_token_ids)
        return None

    def _progress(self) -> list[Update]:
        updates = []
        for request_id, request in list(self._live.items()):
            start = self._reported[request_id]
            if request.num_output_tokens > start or request.is_finished:
                updates.append(_update(request, start, ended=request.is_finished))
                self._reported[request_id] = request.num_output_tokens
            if request.is_finished:
                del self._live[request_id], self._reported[request_id]
        return updates

    def telemetry(self) -> WorkerTelemetry:
        t = self.engine.telemetry
        rows = sum(s.batch_size for s in t.decode_forwards)
        emitted = sum(s.num_emitted for s in t.decode_forwards)
        return WorkerTelemetry(
            self.index, t.num_forwards, rows, emitted, [{"worker": self.index, **row} for row in t.as_rows()]
        )


def _update(request: Request, start: int, ended: bool) -> Update:
    """What `request` generated from output position `start`, as its engine left it."""
    return Update(
        request.request_id,
        start,
        tuple(request.output_token_ids[start:]),
        tuple(request.output_logprobs[start:]),
        ended,
        request.finish_reason,
        request.error,
        request.num_drafted,
        request.num_accepted,
    )
