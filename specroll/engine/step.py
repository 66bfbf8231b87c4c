"""What the stages of one engine step hand each other (`Engine.iterate`): drafting's `DraftBatch` goes
to verification and to observation, verification's `VerifyResult` (`engine.verifier`) to commit, and
commit's `Committed` to observation, which times and counts the step for the policy and telemetry. A
step launched before its predecessor was read back waits as an `InFlight` step."""

from __future__ import annotations

from dataclasses import dataclass

from specroll.drafting.protocol import Draft
from specroll.engine.captured_step import LaunchedStep
from specroll.engine.request import Request
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
    """A recorded decode step launched and not yet read back: its requests (those that finished in
    the meantime are skipped when it is collected), their drafts and the launched step."""

    requests: list[Request]
    drafted: DraftBatch
    launched: LaunchedStep
