"""The typed messages between the coordinator and its workers; torch-free.

The coordinator holds every request's tokens. A dispatch (`WorkItem`) carries a request's prompt and
everything it has generated so far; a worker runs it to its end, unless told to drop it, and answers
with `Update`s: the tokens each request generated since its last report, and whether it finished.
A worker keeps no state the coordinator cannot rebuild, so a lost worker loses at most what it
generated since its last report, and that is regenerated to the same tokens (keyed sampling).

Who writes what (every message is frozen: its writer is whoever constructs it):
- `WorkItem`: the coordinator (`RequestState.work_item`), from its own record of the request; the
  worker reads it into a fresh engine request (`to_request`) and never writes back into it.
- `Update`: the worker (`EngineWorker`), from its engine's request, which alone decided whether and
  why it ended (`Request.commit`, `Request.fail`); the coordinator applies it to its own record
  (`RequestState.apply`) and never to a `Request`.
- `WorkerReport`, `WorkerTelemetry`: the worker; the coordinator only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specroll.engine.request import Request, SamplingParams


@dataclass(frozen=True)
class WorkItem:
    request_id: int
    group_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    output_token_ids: tuple[int, ...]  # generated so far: the worker resumes after them
    output_logprobs: tuple[float, ...]
    noise_key: int | None = None  # the request's (`Request.noise_key`): its tokens on any worker

    def __post_init__(self) -> None:
        if len(self.output_token_ids) >= self.params.max_tokens:
            raise ValueError(
                f"request {self.request_id}: {len(self.output_token_ids)} tokens generated of "
                f"max_tokens {self.params.max_tokens}: nothing is left to run"
            )

    @classmethod
    def first(cls, request: Request) -> WorkItem:
        """A request's first dispatch: its prompt and parameters, nothing generated yet."""
        return cls(
            request.request_id,
            request.group_id,
            request.sample_index,
            tuple(request.prompt_token_ids),
            request.params,
            (),
            (),
            request.noise_key,
        )

    def to_request(self) -> Request:
        """An engine request that resumes from the generated tokens."""
        return Request(
            self.request_id,
            self.group_id,
            self.sample_index,
            self.prompt_token_ids,
            self.params,
            list(self.output_token_ids),
            list(self.output_logprobs),
            noise_key=self.noise_key,
        )


@dataclass(frozen=True)
class Update:
    """What one request generated on a worker since the worker's previous report."""

    request_id: int
    start: int  # output position of token_ids[0]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    ended: bool = False  # the request finished here, or was refused
    finish_reason: str | None = None  # stop | length | error
    error: str | None = None  # the request was refused (bad input): it is finished, with this error
    num_drafted: int = 0  # draft tokens it verified on this worker so far
    num_accepted: int = 0

    def __post_init__(self) -> None:
        is_error = self.finish_reason == "error"
        if self.ended != (self.finish_reason is not None) or (self.error is not None) != is_error:
            raise ValueError(
                f"request {self.request_id}: an update that ends carries its finish reason (and "
                f"an error exactly when that is 'error'), got ended={self.ended}, "
                f"finish_reason={self.finish_reason!r}, error={self.error!r}"
            )


@dataclass(frozen=True)
class WorkerReport:
    worker: int
    updates: tuple[Update, ...]
    busy_seconds: float  # engine time inside this call


@dataclass
class WorkerTelemetry:
    """A worker's engine counters at the end of the rollout."""

    worker: int
    num_forwards: int = 0
    decode_rows: int = 0  # requests summed over verification forwards
    decode_emitted: int = 0  # tokens those forwards emitted
    rows: list[dict] = field(default_factory=list)  # per-forward telemetry (`Telemetry.as_rows`)
