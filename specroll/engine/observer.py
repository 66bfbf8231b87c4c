"""The observe stage of an engine step: the one place that turns what a step did (`StepRecord`) into
the policy's observation (`ForwardStats`) and the telemetry. The stages time and count their own work
and hand it on; nothing else records."""

from __future__ import annotations

from specroll.engine.step import Decoded, StepRecord
from specroll.engine.telemetry import Telemetry
from specroll.policies.base import ForwardStats, SpeculationPolicy


class StepObserver:
    """observe(record): the policy learns from each verification forward, the telemetry counts all."""

    def __init__(self, policy: SpeculationPolicy, telemetry: Telemetry) -> None:
        self._policy, self._telemetry = policy, telemetry

    def observe(self, record: StepRecord) -> None:
        for prefilled in record.prefilled:
            self._telemetry.record_prefill(
                prefilled.num_requests, prefilled.num_computed_tokens, prefilled.seconds
            )
        if record.launched_ahead:
            self._telemetry.record_launched_ahead()
        if record.decoded is not None:
            self._observe_decoded(record.decoded)

    def _observe_decoded(self, decoded: Decoded) -> None:
        if decoded.num_wasted_rows:
            self._telemetry.record_wasted_rows(decoded.num_wasted_rows)
        stats = forward_stats(decoded)
        self._policy.observe(stats)
        self._telemetry.record_decode(stats)


def forward_stats(decoded: Decoded) -> ForwardStats:
    """A verification forward's times and counts: its drafting, then verification and commit together."""
    drafted, result = decoded.drafted, decoded.result
    decision, drafts = drafted.decision, drafted.drafts
    return ForwardStats(
        batch_size=len(decoded.requests),
        num_drafted=sum(d.num_tokens for d in drafts),
        num_accepted=sum(result.num_accepted),
        num_emitted=decoded.committed.num_emitted,
        forward_seconds=decoded.forward_seconds,
        draft_seconds=drafted.draft_seconds,
        request_ids=tuple(r.request_id for r in decoded.requests),
        drafted=tuple(d.num_tokens for d in drafts),
        accepted=tuple(result.num_accepted),
        drafter=decision.drafter,
        sources=tuple(d.source for d in drafts),
        tree=decision.tree or any(d.is_tree for d in drafts),  # asked for, or a drafter's own
        upkeep_seconds=drafted.upkeep_seconds,
    )
