"""Plain decoding held without re-pricing: `auto`'s rule for the forwards where it drafts nothing.
Imports no torch.

Pricing a forward (every chain cap, every tree budget, samples of a draining batch's remaining
lengths) costs `auto` about half a millisecond of Python: 3-4 % of a SmolLM2 forward at batch 1-8 on
one CPU thread, so a speculative engine that drafts nothing would run 3-4 % below plain decoding.
While `auto` decodes plain, what it prices hardly moves: no draft measures no acceptance, and the
batch's lengths and contexts move by one token a forward. So once a priced forward chose plain
decoding, the forwards after it decode plain unpriced while

- the batch holds the same requests (none joined, none finished),
- no forward drafted since (a probe measured acceptance, which may change the choice),
- fewer than `max_forwards` forwards were held since the last pricing,
- and the forward is not a probe step (`AutoPolicy`'s draw, which stays one a forward).

The warm-up holds too. Its probes are priced against the work left (`exploration`): one priced not
to pay on this batch pays less a forward later, with the same requests and less work to go, and a
warm-up that drafts nothing measures nothing, so pricing every forward until it ends (as `auto` once
did) priced every forward of a rollout that never drafts: SmolLM2 at batch 8 on one CPU thread, 128
tokens, 127 of 127 forwards priced, its decision 0.72 ms of a 21 ms step.

A held forward costs a comparison of request ids. A tree budget still unmeasured, which `auto` may
try on any forward, waits at most `max_forwards` forwards for its next chance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class PlainHold:
    max_forwards: int = 8
    _batch: tuple[int, ...] | None = field(default=None, init=False, repr=False)
    _held: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_forwards < 0:
            raise ValueError(f"max_forwards must be >= 0, got {self.max_forwards}")

    def start(self, request_ids: Sequence[int]) -> None:
        """A priced forward over these requests chose plain decoding."""
        self._batch, self._held = tuple(request_ids), 0

    def end(self) -> None:
        """A forward drafts (or was priced to): the next one is priced."""
        self._batch = None

    def holds(self, request_ids: Sequence[int], is_probe_step: bool) -> bool:
        """Whether this forward decodes plain unpriced (and counts it as held)."""
        if (
            self._batch is None
            or is_probe_step
            or self._held >= self.max_forwards
            or tuple(request_ids) != self._batch
        ):
            return False
        self._held += 1
        return True
