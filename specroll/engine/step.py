"""What the stages of one engine step hand each other (`Engine.iterate`): drafting's `DraftBatch` goes
to the launch; the launch's `InFlight` step to verification (`Stepper.verified`, the one place a
`VerifyResult` is made); that to commit, whose `Committed` goes with the rest into the stage's record
(`Prefilled`, `Decoded`). An iteration's records make its `StepRecord`, which the observer
(`engine.observer`) alone turns into the policy's observation and the telemetry. A decode step
launched before its predecessor was read back waits across iterations as an `InFlight` step."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from specroll.drafting.protocol import Draft
from specroll.engine.captured_step import LaunchedStep
from specroll.engine.request import Request
from specroll.engine.verifier import VerifyResult
from specroll.model.runner import ForwardOutput, SequenceInput
from specroll.policies.base import DraftDecision


@dataclass(frozen=True)
class DraftBatch:
    """One forward's drafts, a request each in the batch's order.

    decision:       the policy's, naming the drafter that did propose (None for a single drafter).
    drafts:         each request's draft (no tokens where its budget was 0).
    draft_seconds:  the policy's decision and the drafting together.
    upkeep_seconds: the part of drafting that caught up context skipped while nothing was drafted
                    (`Drafter.upkeep_seconds`): paid once, not per drafting forward.
    drafted_at:     `time.perf_counter()` once drafted: the forward's time runs from here to its observation.
    """

    decision: DraftDecision
    drafts: list[Draft]
    draft_seconds: float
    upkeep_seconds: float
    drafted_at: float

    @classmethod
    def nothing(cls, requests: list[Request], at: float) -> DraftBatch:
        """No drafts (a prefill's): its time runs from `at`."""
        decision = DraftDecision.uniform(0, len(requests))
        return cls(decision, [Draft(r.request_id) for r in requests], 0.0, 0.0, at)


@dataclass(frozen=True)
class Committed:
    """What a forward's commit kept: each request's tokens appended (none past a stop token or
    max_tokens), in the batch's order, and the requests that finished."""

    kept: list[list[int]]
    finished: list[Request]

    @property
    def num_emitted(self) -> int:
        return sum(len(tokens) for tokens in self.kept)


@dataclass(frozen=True)
class InFlight:
    """A forward launched and not yet verified: its requests, their drafts, what each was fed, and the
    launch: a recorded step on its way (`LaunchedStep`, read back by `CapturedStep.collect`) or a
    forward launched from Python, its logits on the device (verified by `verifier.verify_batch`).
    A recorded decode step launched ahead waits across iterations; requests that finished in the
    meantime are skipped when it is verified."""

    requests: list[Request]
    drafted: DraftBatch
    inputs: list[SequenceInput]
    launched: LaunchedStep | ForwardOutput

    @property
    def is_recorded(self) -> bool:
        return isinstance(self.launched, LaunchedStep)

    @property
    def is_done(self) -> bool:
        """Every one of its requests finished before it was read back: nothing of it is of use."""
        return all(r.finish_reason is not None for r in self.requests)

    def restarted(self) -> InFlight:
        """The step with its time running from now: a step launched ahead was computed by the device
        while the one before it was committed, so its own time starts once that one is observed."""
        return replace(self, drafted=replace(self.drafted, drafted_at=time.perf_counter()))

    def select(self, keep: list[int]) -> InFlight:
        """The requests at indices `keep`, in that order, with their drafts and inputs; the launch
        is the whole step's (`VerifyResult.select` picks its rows)."""
        pick = lambda values: [values[i] for i in keep]  # noqa: E731
        drafted = replace(self.drafted, drafts=pick(self.drafted.drafts))
        return InFlight(pick(self.requests), drafted, pick(self.inputs), self.launched)


@dataclass(frozen=True)
class Prefilled:
    """One prefill forward: the requests it finished, and what it cost.

    num_requests:        the requests it prefilled (each emitted one token).
    num_computed_tokens: the context tokens it computed (a shared prompt once).
    seconds:             from its packing to its commit.
    """

    finished: list[Request]
    num_requests: int
    num_computed_tokens: int
    seconds: float


@dataclass(frozen=True)
class Decoded:
    """One verification forward, read back and committed.

    requests:        those committed, in the batch's order (a step launched ahead skips the ones
                     that finished before it was read back).
    drafted:         their drafts.
    result:          their verification.
    committed:       what commit kept.
    forward_seconds: from the end of drafting (or, for a step launched ahead, from the commit of the
                     step before it) to the end of its commit.
    num_wasted_rows: rows computed for requests that had finished meanwhile, never read.
    """

    requests: list[Request]
    drafted: DraftBatch
    result: VerifyResult
    committed: Committed
    forward_seconds: float
    num_wasted_rows: int = 0


@dataclass(frozen=True)
class StepRecord:
    """What one engine iteration did, for the observer: its prefill forwards, its verification forward
    (None where nothing was decoded) and whether it launched the next step ahead."""

    prefilled: list[Prefilled]
    decoded: Decoded | None
    launched_ahead: bool

    @property
    def finished(self) -> list[Request]:
        finished = [r for p in self.prefilled for r in p.finished]
        return finished + (self.decoded.committed.finished if self.decoded is not None else [])
