"""Replay one recorded response through a drafter, the recorded tokens standing in for the target model.

Each simulated verification forward the drafter proposes up to `max_draft` tokens after the context
(prompt + the recorded tokens so far). The accepted length is the deepest drafted path equal to the
recorded next tokens; the context then advances by it plus one bonus token (the target's own token), as
in lossless speculative decoding with a greedy target. Mean acceptance length = target tokens / forwards,
bonus included (Seer, Table 2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from specroll.drafting.protocol import Drafter, DraftQuery, RequestInfo


@dataclass
class ReplayStats:
    """Totals over replayed responses."""

    num_forwards: int = 0  # simulated verification forwards (one draft + one bonus token each)
    target_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0  # drafted tokens that matched, bonus tokens excluded
    propose_seconds: float = 0.0  # inside `propose` (deferred index updates included)
    observe_seconds: float = 0.0  # inside begin / observe / finish / advance_step, references' included

    def add(self, other: ReplayStats) -> None:
        self.num_forwards += other.num_forwards
        self.target_tokens += other.target_tokens
        self.drafted_tokens += other.drafted_tokens
        self.accepted_tokens += other.accepted_tokens
        self.propose_seconds += other.propose_seconds
        self.observe_seconds += other.observe_seconds

    @property
    def mean_acceptance_length(self) -> float:
        return self.target_tokens / self.num_forwards if self.num_forwards else 0.0

    @property
    def us_per_proposal(self) -> float:
        return 1e6 * self.propose_seconds / self.num_forwards if self.num_forwards else 0.0

    @property
    def us_per_forward(self) -> float:
        """All drafter time per forward: proposing, and taking in targets' and references' tokens."""
        return (
            1e6 * (self.propose_seconds + self.observe_seconds) / self.num_forwards
            if self.num_forwards
            else 0.0
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "num_forwards": self.num_forwards,
            "target_tokens": self.target_tokens,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "us_per_proposal": round(self.us_per_proposal, 2),
            "us_per_forward": round(self.us_per_forward, 2),
        }


def replay(drafter: Drafter, info: RequestInfo, response: Sequence[int], max_draft: int) -> ReplayStats:
    """Run one recorded response through `drafter` from `begin` to `finish`."""
    stats = ReplayStats(target_tokens=len(response))
    context = list(info.prompt_token_ids)
    drafter.begin(info)
    position = 0
    while position < len(response):
        query = DraftQuery(info.request_id, info.group_id, context, len(info.prompt_token_ids), max_draft)
        started = time.perf_counter()
        draft = drafter.propose([query])[0]
        stats.propose_seconds += time.perf_counter() - started
        accepted = draft.kept_in_exact_mode(response[position:])
        advance = min(accepted + 1, len(response) - position)
        committed = response[position : position + advance]
        context.extend(committed)
        started = time.perf_counter()
        drafter.observe(info.request_id, committed)
        stats.observe_seconds += time.perf_counter() - started
        stats.num_forwards += 1
        stats.drafted_tokens += draft.num_tokens
        stats.accepted_tokens += accepted
        position += advance
    drafter.finish(info.request_id)
    return stats


def feed(drafter: Drafter, info: RequestInfo, response: Sequence[int]) -> float:
    """Show `drafter` a whole response as if it had been generated without drafting; returns the
    seconds the drafter took."""
    started = time.perf_counter()
    drafter.begin(info)
    drafter.observe(info.request_id, response)
    drafter.finish(info.request_id)
    return time.perf_counter() - started
