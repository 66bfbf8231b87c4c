"""Per-forward records of a rollout, kept with its output for benchmarks and reports.

Three figures of a draft's acceptance, named apart everywhere: the acceptance rate (alpha, the chance
that a draft token is accepted; `acceptance_rate` here is accepted over drafted tokens, and the policies
estimate alpha per request, `policies/acceptance_estimates.py`), the acceptance length (tokens a
request gains a forward: its accepted draft tokens + 1) and the tokens accepted per draft."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Iterable, Mapping

from specroll.policies.base import ForwardStats
from specroll.policies.calibration import batch_bucket


@dataclass
class Telemetry:
    decode_forwards: list[ForwardStats] = field(default_factory=list)
    num_prefills: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    output_tokens: int = 0  # emitted by all forwards, before stop/length truncation
    steps_launched_ahead: int = 0  # decode steps launched before the previous one was read back
    rows_wasted: int = 0  # their rows of requests that stopped in the previous step, never read

    def clear(self) -> None:
        """Start counting afresh (an engine kept across rollouts, e.g. one per RL training step)."""
        self.decode_forwards = []
        self.num_prefills = self.prefill_tokens = self.output_tokens = 0
        self.steps_launched_ahead = self.rows_wasted = 0
        self.prefill_seconds = 0.0

    def record_prefill(self, num_requests: int, num_tokens: int, seconds: float) -> None:
        self.num_prefills += 1
        self.output_tokens += num_requests
        self.prefill_tokens += num_tokens
        self.prefill_seconds += seconds

    def record_launched_ahead(self) -> None:
        self.steps_launched_ahead += 1

    def record_wasted_rows(self, num_rows: int) -> None:
        self.rows_wasted += num_rows

    def record_decode(self, stats: ForwardStats) -> None:
        self.decode_forwards.append(stats)
        self.output_tokens += stats.num_emitted

    @property
    def num_forwards(self) -> int:
        return self.num_prefills + len(self.decode_forwards)

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per request per verification forward (1.0 = no speculation gain)."""
        rows = sum(s.batch_size for s in self.decode_forwards)
        return sum(s.num_emitted for s in self.decode_forwards) / rows if rows else 0.0

    @property
    def acceptance_rate(self) -> float:
        drafted = sum(s.num_drafted for s in self.decode_forwards)
        return sum(s.num_accepted for s in self.decode_forwards) / drafted if drafted else 0.0

    def accepted_per_draft_by_source(self) -> dict[str, float]:
        """Mean tokens accepted per verified draft, by the drafter that proposed it (named drafts only)."""
        drafts: dict[str, int] = {}
        accepted: dict[str, int] = {}
        for s in self.decode_forwards:
            for source, k, a in zip(s.sources, s.drafted, s.accepted):
                if source and k:
                    drafts[source] = drafts.get(source, 0) + 1
                    accepted[source] = accepted.get(source, 0) + a
        return {name: accepted[name] / drafts[name] for name in sorted(drafts)}

    def as_rows(self) -> list[dict]:
        """One dict a forward, its fields by name. Shallow: every field is immutable (numbers, strings,
        tuples of them), and `dataclasses.asdict`'s deep copy cost some 30 microseconds a forward at
        batch 8 (more at 64), paid by every rollout at its end."""
        return [{name: getattr(s, name) for name in _FIELD_NAMES} for s in self.decode_forwards]


_FIELD_NAMES = tuple(f.name for f in fields(ForwardStats))


def forward_from_row(row: Mapping) -> ForwardStats:
    """A forward back from its telemetry row (`as_rows`); keys a row gained on its way (the worker
    that ran it, in a rollout over several) are left out."""
    return ForwardStats(**{f.name: row[f.name] for f in fields(ForwardStats) if f.name in row})


def batch_label(batch_size: int) -> str:
    """A batch size's bucket as the policies bucket it (powers of two): `1`, `2-3`, `4-7`, ..."""
    low = 1 << batch_bucket(batch_size)
    return str(low) if low == 1 else f"{low}-{2 * low - 1}"


def drafts_by_batch(forwards: Iterable[ForwardStats]) -> dict[str, dict[str, int]]:
    """Decode forwards by batch-size bucket, then by what they verified (`none`, `chain-K`,
    `tree-N`): where a policy drafted what."""
    counts: dict[int, dict[str, int]] = {}
    for s in forwards:
        shapes = counts.setdefault(batch_bucket(s.batch_size), {})
        shapes[s.shape] = shapes.get(s.shape, 0) + 1
    return {batch_label(1 << b): dict(sorted(counts[b].items())) for b in sorted(counts)}


def describe_drafts(counts: Mapping[str, Mapping[str, int]]) -> str:
    """`1: tree-8 90%, 2-3: chain-2 75%, ...`: each batch bucket's most frequent draft and its share
    ('' where nothing was drafted)."""
    if all(set(shapes) <= {"none"} for shapes in counts.values()):
        return ""
    parts = []
    for label, shapes in counts.items():
        shape, n = max(shapes.items(), key=lambda item: item[1])
        parts.append(f"{label}: {shape} {n / sum(shapes.values()):.0%}")
    return ", ".join(parts)
