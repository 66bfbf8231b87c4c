"""The contract between the engine and a speculation policy. Imports no torch.

Every engine step the policy sees the running batch and answers, per request, how many draft tokens
to propose and verify (0 = plain decoding). After the step it is told what happened, so adaptive
policies can learn from acceptance and measured step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class RequestView:
    request_id: int
    group_id: int
    num_output_tokens: int
    num_remaining: int  # tokens it may still emit before max_tokens
    num_drafted: int  # over its lifetime so far
    num_accepted: int
    num_forwards: int  # verification forwards it took part in
    num_context_tokens: int = 0  # positions cached before this step (prompt + output); 0 = not reported


@dataclass(frozen=True)
class BatchView:
    requests: Sequence[RequestView]
    max_draft: int  # the engine's cap on any request's draft

    @property
    def batch_size(self) -> int:
        return len(self.requests)


@dataclass(frozen=True)
class StepStats:
    """What one verification forward did."""

    batch_size: int
    num_drafted: int  # draft tokens verified, over the batch
    num_accepted: int  # of those, accepted
    num_emitted: int  # tokens committed (accepted + one per request)
    forward_seconds: float
    draft_seconds: float
    request_ids: tuple[int, ...] = ()  # the batch, in order
    drafted: tuple[int, ...] = ()  # draft tokens verified, per request
    accepted: tuple[int, ...] = ()  # of those, accepted, per request
    sources: tuple[str, ...] = ()  # which drafter proposed each request's draft ('' if not named)


@runtime_checkable
class SpeculationPolicy(Protocol):
    name: str

    def draft_lengths(self, batch: BatchView) -> list[int]: ...

    def observe(self, stats: StepStats) -> None: ...
