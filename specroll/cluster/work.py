"""The typed messages between the coordinator and its workers; torch-free.

The coordinator holds every request's tokens. A dispatch (`WorkItem`) carries a request's prompt and
everything it has generated so far, and the output position it may run to; a worker answers with
`Update`s: the tokens each request generated since its last report, and whether its dispatch ended.
A worker keeps no state the coordinator cannot rebuild, so a lost worker loses at most what it
generated since its last report, and that is regenerated to the same tokens (keyed sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specroll.engine.request import Request, SamplingParams


@dataclass(frozen=True)
class WorkItem:
    request_id: int
    group_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams  # the request's own: max_tokens is its whole output budget
    output_token_ids: tuple[int, ...]
    output_logprobs: tuple[float, ...]
    stop_at: int  # the output position at which this dispatch ends (a chunk's end, or max_tokens)

    def __post_init__(self) -> None:
        if not len(self.output_token_ids) < self.stop_at <= self.params.max_tokens:
            raise ValueError(f"request {self.request_id}: a dispatch must run from {len(self.output_token_ids)} "
                             f"generated tokens to a stop in ({len(self.output_token_ids)}, {self.params.max_tokens}], "
                             f"got {self.stop_at}")

    def to_request(self) -> Request:
        """An engine request that resumes from the generated tokens and stops at `stop_at`."""
        return Request(self.request_id, self.group_id, self.sample_index, self.prompt_token_ids,
                       replace(self.params, max_tokens=self.stop_at), list(self.output_token_ids),
                       list(self.output_logprobs))


@dataclass(frozen=True)
class Update:
    """What one request generated on a worker since the worker's previous report."""

    request_id: int
    start: int  # output position of token_ids[0]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    ended: bool = False  # the dispatch is over: finished, stopped at its chunk's end, or refused
    finish_reason: str | None = None  # the engine's, against the dispatch's stop ("length" at stop_at)
    error: str | None = None  # the request was refused (bad input): it is finished, with this error


@dataclass(frozen=True)
class WorkerReport:
    worker: int
    updates: tuple[Update, ...]
    busy_seconds: float  # engine time inside this call
    num_running: int  # requests still on the worker after the call


@dataclass
class WorkerTelemetry:
    """A worker's engine counters at the end of the rollout."""

    worker: int
    num_forwards: int = 0
    decode_rows: int = 0  # requests summed over verification forwards
    decode_emitted: int = 0  # tokens those forwards emitted
    busy_seconds: float = 0.0
    rows: list[dict] = field(default_factory=list)  # per-forward telemetry (`Telemetry.as_rows`)
